"""``python -m tpo_gym.data``: put the offline MNIST copy into the cache (:func:`tpo_gym.data.mnist.main`)."""

from tpo_gym.data.mnist import main

main()
