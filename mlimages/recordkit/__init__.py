"""Building and checking records: the libraries of tools/make_image_list.py,
make_tfrecords.py, convert_tfrecords.py, check_tfrecords.py and the download path's
urls_to_img2dataset.py and img2dataset_to_list.py.

    make_tfrecords.py     image lists -> TFRecord shards (build_records)
    make_command.py       tools/make_tfrecords.py's main: options -> build_records -> summary
    shard_writing.py      one shard of the plan, written by a worker process
    make_options.py       tools/make_tfrecords.py's argparse parser and archive flags
    make_image_list.py    tools/make_image_list.py's command line
    own_images.py         a user's folder per class or CSV -> an image list and dictionary
    image_lists.py        the image list grammar
    images.py             image files read and returned as JPEG bytes
    archives.py           ImageNet's tar archives, read in place
    imagenet.py           ImageNet-1k's class indices and the lists its archives imply
    shard_plan.py         which list lines go into which shard, where an archived image lies
    shards.py             shard files written so that a killed run resumes
    convert_tfrecords.py  existing shards rewritten: downscaled images, compact labels
    record_checks.py      the checks of one serialized record
    shard_checks.py       the checks of whole shard files and their label statistics
    check_tfrecords.py    tools/check_tfrecords.py: the checks over every shard, in workers
    check_report.py       check_tfrecords' text report
    urls_to_img2dataset.py  tools/urls_to_img2dataset.py: a URL list -> img2dataset's input
    img2dataset_to_list.py  tools/img2dataset_to_list.py: img2dataset's files -> a list
    img2dataset_shards.py   whether an img2dataset download is whole, its shards' rows"""
