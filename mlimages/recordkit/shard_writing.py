"""One shard of make_tfrecords.build_records' plan, written by a worker process (or the
parent with one worker): its images read (from files, or tar archives) and stored as
records with their labels (make_tfrecords.py's docstring has the record format).
"""
import os
import pickle
import time

from mlimages.data import hierarchy as hierarchy_lib
from mlimages.errors import BadImageError
from mlimages.cli import lazy_tensorflow
from mlimages.cli import progress as _progress
from mlimages.recordkit import archives
from mlimages.recordkit import shard_plan
from mlimages.recordkit import shards
from mlimages.recordkit.images import load_image, record_image


def write_shard(task, on_progress=None):
    """Write one shard of the plan (shard_plan.py; shards.ShardWriter); returns a result
    dict. Archived images are read first, each archive opened once (archives.py), and
    written in list order; the task holds its shard's image bytes meanwhile."""
    skipped = []
    added = {'labels': 0, 'images': 0}
    pending_done = pending_skipped = 0
    last_report = time.monotonic()
    if task.get('hierarchy_file'):
        task = dict(task, hierarchy=_shared_hierarchy(task['hierarchy_file']))
    lines = list(shard_plan.task_lines(task))
    source = task.get('source')
    if source is not None:
        data_of = archives.read_members(source, [
            (i, source.split(line[1])[0], line[3], line[4]) for i, line in enumerate(lines)])
    with shards.ShardWriter(task['path']) as writer:
        for position, (lineno, image, labels, _, _) in enumerate(lines):
            try:
                if source is not None:
                    data, width, height = record_image(
                        data_of.pop(position), task['jpeg_quality'],
                        task.get('short_side', 0))
                else:
                    data, width, height = load_image(
                        os.path.join(task['image_root'], image), task['jpeg_quality'],
                        task.get('short_side', 0))
            except BadImageError as exc:
                skipped.append((task['list'], lineno, image, str(exc)))
                pending_skipped += 1
            else:
                example, count = _labelled_example(task, data, labels, width, height, image)
                added['labels'] += count
                added['images'] += count > 0
                writer.write(example.SerializeToString())
            pending_done += 1
            now = time.monotonic()
            if on_progress is not None and now - last_report >= _progress.PROGRESS_INTERVAL:
                on_progress(pending_done, pending_skipped)
                pending_done = pending_skipped = 0
                last_report = now
    if writer.count:
        shards.append_count(task['path'], writer.count)
    if on_progress is not None and (pending_done or pending_skipped):
        on_progress(pending_done, pending_skipped)
    return {'index': task['index'], 'path': task['path'], 'written': writer.count,
            'skipped': skipped, 'labels_added': added['labels'],
            'images_closed': added['images']}


_HIERARCHIES = {}


def _shared_hierarchy(path):
    """The hierarchy a run's parent pickled once for its workers, loaded once per worker:
    in every task it would be pickled per shard (0.9 MB, 30 ms at 11,166 classes)."""
    if path not in _HIERARCHIES:
        with open(path, 'rb') as f:
            _HIERARCHIES[path] = pickle.load(f)
    return _HIERARCHIES[path]


def _labelled_example(task, data, labels, width, height, image):
    """(the Example of one image, labels added): with task['hierarchy'] the labels are
    closed under ancestors first (hierarchy.close_sparse, the module docstring's rule)."""
    classes = sorted(labels)
    values, added = [labels[c] for c in classes], 0
    if task.get('hierarchy') is not None:
        classes, values, added = hierarchy_lib.close_sparse(classes, values,
                                                            task['hierarchy'])
    lazy_tensorflow.tensorflow()
    from mlimages.data import records
    if task.get('single_label'):
        return records.make_class_index_example(data, classes[0], width, height, image), 0
    if task.get('label_layout') == 'sparse':
        return records.make_sparse_example(data, classes, values, width, height, image), added
    label = records.dense_label(classes, values, task['class_num'])
    return records.make_example(data, label, width, height, image), added
