"""Building and checking records (the libraries of tools/make_tfrecords.py,
convert_tfrecords.py, check_tfrecords.py, img2dataset_to_list.py): image lists, images,
ImageNet archives, shard writing and plans, record and shard checks."""
