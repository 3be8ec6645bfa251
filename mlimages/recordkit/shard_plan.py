"""The plan of a record build, made once in make_tfrecords' parent: which list lines go
into which shard, and where an archived image lies.

Validating the lists reads every line once and keeps of each image line its byte offset
in the list and its line number; with archives (archives.py) also the offset and size of
the image in its archive, -1 when it is missing from the release. The lines are put in
shard order -- list k whole, or with K shards shard k = image lines k, k + K, ... of the
one list (round-robin; missing images are left out first) -- and saved as one .npy file
(32 bytes a line) beside the shards; a shard task memory-maps it, takes its slice
[start, stop) and seeks to its own lines in the list. Every line is so parsed twice
(validation, writing) whatever K is: a task that scanned the whole list for its lines made
K parses (6.9 us a line: 121 s a shard task at 17.6 M lines).
"""
import array
import os

import numpy as np

from mlimages.recordkit import archives
from mlimages.errors import ListFormatError
from mlimages.recordkit.image_lists import parse_raw_line, scan_list, split_line

PLAN_DTYPE = np.dtype([('offset', '<i8'), ('lineno', '<i8'), ('data', '<i8'),
                       ('size', '<i8')])


def scan(list_files, class_num, source=None, single_label=False):
    """Validate every list (single_label: every line one class, confidence 1); returns one
    PLAN_DTYPE array per list (data/size -1) and, with a source, {archive key: array of
    (list number, position)} to resolve."""
    plans, by_key = [], {}
    for number, path in enumerate(list_files):
        offsets, linenos = array.array('q'), array.array('q')
        for offset, lineno, image, labels in scan_list(path, class_num, with_offsets=True):
            if single_label and list(labels.values()) != [1.0]:
                raise ListFormatError(path, lineno, '--label_type single needs exactly one '
                                      'class with confidence 1 a line, got %s'
                                      % (' '.join('%d:%g' % kv for kv in sorted(labels.items()))
                                         or 'none'))
            if source is not None:
                key = source.split(image)[0]
                by_key.setdefault(key, array.array('q')).extend((number, len(offsets)))
            offsets.append(offset)
            linenos.append(lineno)
        plan = np.full(len(offsets), -1, PLAN_DTYPE)
        plan['offset'] = np.frombuffer(offsets, np.int64) if offsets else 0
        plan['lineno'] = np.frombuffer(linenos, np.int64) if linenos else 0
        plans.append(plan)
    return plans, by_key


def resolve(plans, by_key, list_files, source, out_dir, run_tasks, note=None):
    """Fill data/size of the plans through the archives' indexes (built with
    run_tasks(archives.build_index, tasks) where not cached); one index in memory at a
    time. Returns the number of images missing from the release."""
    found = archives.units(source, sorted(by_key), out_dir)
    tasks = archives.index_tasks(found, out_dir)
    if tasks and note is not None:
        note('indexing %d archives of %s (cached in %s)' % (
            len(tasks), source.describe(), os.path.join(out_dir, archives.INDEX_DIR)))
    run_tasks(tasks)
    handles = [open(path, 'rb') for path in list_files]
    missing = 0
    try:
        for key in sorted(by_key):
            pairs = np.frombuffer(by_key[key], np.int64).reshape(-1, 2)
            index = {}
            if key in found:
                archive, start, _ = found[key]
                index = archives.load_index(archives.index_path(out_dir, key), archive,
                                            start) or {}
            for number, position in pairs.tolist():
                plan, f = plans[number], handles[number]
                f.seek(int(plan['offset'][position]))
                image = split_line(f.readline().decode('utf-8', 'replace').lstrip('\ufeff'))[0]
                place = index.get(source.split(image)[1])
                if place is None:
                    missing += 1
                else:
                    plan['data'][position], plan['size'][position] = place
    finally:
        for f in handles:
            f.close()
    return missing


def shard_order(plans, num_shards, source=None):
    """(plan in shard order, [(list number, start, stop)] per shard); with a source the
    missing images are left out (they are reported, not dealt)."""
    if num_shards is None:
        bounds, start = [], 0
        kept = [p[p['size'] >= 0] if source is not None else p for p in plans]
        for number, plan in enumerate(kept):
            bounds.append((number, start, start + len(plan)))
            start += len(plan)
        return np.concatenate(kept), bounds
    plan = plans[0]
    if source is not None:
        plan = plan[plan['size'] >= 0]
    order = np.argsort(np.arange(len(plan)) % num_shards, kind='stable')
    sizes = [len(plan) // num_shards + (1 if k < len(plan) % num_shards else 0)
             for k in range(num_shards)]
    edges = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return plan[order], [(0, int(edges[k]), int(edges[k + 1])) for k in range(num_shards)]


def missing_entries(plans, list_files, source):
    """(list file, lineno, image, reason) of every image missing from the release."""
    out = []
    for plan, path in zip(plans, list_files):
        gone = plan[plan['size'] < 0]
        if not len(gone):
            continue
        with open(path, 'rb') as f:
            for offset, lineno in zip(gone['offset'].tolist(), gone['lineno'].tolist()):
                f.seek(offset)
                image = split_line(f.readline().decode('utf-8', 'replace').lstrip('\ufeff'))[0]
                key, member = source.split(image)
                where = source.file_of(key)
                out.append((path, lineno, image, 'missing from the release: no %s in %s'
                            % (member, where) if os.path.isfile(where)
                            else 'missing from the release: no %s' % where))
    return out


def save(plan, path):
    """The plan file of a run (removed by the caller at the end)."""
    tmp = '%s.tmp-%d.npy' % (path, os.getpid())
    np.save(tmp, plan)
    os.replace(tmp, path)


def task_lines(task):
    """Yield (lineno, image, labels, data offset, size) of a shard task's plan slice."""
    plan = np.load(task['plan'], mmap_mode='r')[task['start']:task['stop']]
    with open(task['list'], 'rb') as f:
        for offset, lineno, data, size in plan.tolist():
            f.seek(offset)
            parsed = parse_raw_line(f.readline(), task['class_num'], task['list'], lineno)
            yield (lineno,) + parsed + (data, size)
