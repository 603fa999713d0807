"""Make the checkout importable as ansible_collections.gpufleet.upgrade for every test."""

import sys

from scripts.collection_path import ensure_collection_link

sys.path.insert(0, str(ensure_collection_link()))
