"""Dataset loading for the ``tpo_gym`` environments (numpy only, no network unless asked)."""

from tpo_gym.data.mnist import (
    SHA256,
    MNISTSource,
    default_cache_dir,
    download_mnist,
    find_mnist_source,
    load_mnist,
)

__all__ = ["SHA256", "MNISTSource", "default_cache_dir", "download_mnist", "find_mnist_source", "load_mnist"]
