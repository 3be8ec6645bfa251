"""ImageNet-1k (ILSVRC2012) for make_tfrecords.py: class indices and the image lists
its archives imply, for single-label records (--label_type=single).

Class order: --dictionary is the original's imagenet2012_dictionary.txt, `index<TAB>name`
per line with no WordNet id; its classes are the 1000 synsets in sorted WordNet-id order
(0 = n01440764 tench, 1 = n01443537 goldfish, ...), the order of ILSVRC2012's class ids,
so the synsets found (the inner tars of the train tar, the wnids of the validation
labels) must be exactly as many as its lines. A dictionary whose lines name a WordNet id
(`n01440764`, alone or among other fields) gives its own order instead.

Lists written to <out_dir> (the input of build_records, kept for the record):
  imagenet_train_list.txt  `<wnid>/<file> <class>` for every member of every inner tar,
                           shuffled with a fixed seed (SEED): the round-robin shards are
                           then not class-sorted, which a shuffle buffer could not undo
  imagenet_val_list.txt    `<file> <class>` per line of --val_labels (`<file> <wnid>`)
"""
import os
import random
import re

from mlimages.recordkit import archives
from mlimages.errors import InputError

SEED = 20120101
_WNID = re.compile(r'n\d{8}\Z')


def load_dictionary(path):
    """(class count, [wnid per class] or None for a names-only dictionary)."""
    if not os.path.isfile(path):
        raise InputError('no such dictionary file: %s (imagenet2012_dictionary.txt)' % path)
    with open(path, encoding='utf-8', errors='replace') as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    if not lines:
        raise InputError('dictionary %s is empty' % path)
    wnids = [[t for t in line.split() if _WNID.match(t)] for line in lines]
    if not all(len(w) == 1 for w in wnids):
        return len(lines), None
    ordered = [w[0] for w in wnids]
    if len(set(ordered)) != len(ordered):
        raise InputError('dictionary %s names a WordNet id twice' % path)
    return len(lines), ordered


def class_indices(dictionary, wnids, what):
    """{wnid: class} of the synsets found (`what` says where, for errors)."""
    count, ordered = load_dictionary(dictionary)
    found = sorted(set(wnids))
    if ordered is None:
        if len(found) != count:
            raise InputError('%s has %d synsets, dictionary %s %d classes: a names-only '
                             'dictionary takes the synsets in sorted order and needs '
                             'them all' % (what, len(found), dictionary, count))
        return {w: i for i, w in enumerate(found)}, count
    index = {w: i for i, w in enumerate(ordered)}
    unknown = [w for w in found if w not in index]
    if unknown:
        raise InputError('%s has synset %s, which dictionary %s does not list'
                         % (what, unknown[0], dictionary))
    return index, count


def write_train_list(train_tar, dictionary, out_dir, run_tasks):
    """Index the train tar (run_tasks(build_index, tasks) runs the inner-tar indexing)
    and write imagenet_train_list.txt; returns (list path, class count)."""
    source = archives.Source('nested', train_tar)
    found = archives.units(source, archives.outer_members(source, out_dir), out_dir)
    if not found:
        raise InputError('%s holds no inner <wnid>.tar archives: is it '
                         'ILSVRC2012_img_train.tar?' % train_tar)
    run_tasks(archives.index_tasks(found, out_dir))
    index, count = class_indices(dictionary, found, train_tar)
    lines = []
    for wnid in sorted(found):
        archive, start, _ = found[wnid]
        members = archives.load_index(archives.index_path(out_dir, wnid), archive, start)
        lines += ['%s/%s %d' % (wnid, name, index[wnid]) for name in sorted(members)]
    random.Random(SEED).shuffle(lines)
    return _write(os.path.join(out_dir, 'imagenet_train_list.txt'), lines), count


def write_val_list(val_labels, dictionary, out_dir):
    """imagenet_val_list.txt from the `<file> <wnid>` label list; (path, class count)."""
    if not os.path.isfile(val_labels):
        raise InputError('no such validation label list: %s' % val_labels)
    pairs = []
    with open(val_labels, encoding='utf-8') as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2 or not _WNID.match(fields[1]):
                raise InputError('%s:%d: expected "<file> <wnid>", got %r'
                                 % (val_labels, lineno, line.strip()[:80]))
            pairs.append(fields)
    if not pairs:
        raise InputError('validation label list %s is empty' % val_labels)
    index, count = class_indices(dictionary, [w for _, w in pairs], val_labels)
    return _write(os.path.join(out_dir, 'imagenet_val_list.txt'),
                  ['%s %d' % (name, index[wnid]) for name, wnid in pairs]), count


def _write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = '%s.tmp-%d' % (path, os.getpid())
    with open(tmp, 'w', encoding='utf-8') as f:
        f.writelines(line + '\n' for line in lines)
    os.replace(tmp, path)
    return path
