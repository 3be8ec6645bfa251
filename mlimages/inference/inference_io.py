"""Inference input and output: the images to run (paths, image lists, directories), the
class dictionary, and the result files (TSV / JSON lines, through files.atomic_output:
they appear only when complete). No TensorFlow graph here; serving.py runs the model.
"""
import json
import os
import sys

import numpy as np
import tensorflow.compat.v1 as tf

import file_db
from mlimages.data import hierarchy as hierarchy_lib
from mlimages.data.class_names import load_class_names  # noqa: F401 -- predict's loader
from mlimages import errors
from mlimages.errors import UsageError

DEFAULT_TOP_K = 5
DEFAULT_THRESHOLD = 0.5
# What a directory given as an image source contributes (TensorFlow's decode_image formats).
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.gif', '.bmp')


# ---------------------------------------------------------------------------- images

def list_file_entries(list_file, image_root=None):
    """(name, path) per line of a list file: the path is the text before the first tab, or
    the first whitespace-separated field of a line without tabs, so the image lists of the
    record builder (with their labels) work as they are. Relative paths are taken relative
    to image_root (default: the current directory); the name is the path as written."""
    entries = []
    for line in _list_lines(list_file, comments=True):
        name = line.split('\t', 1)[0].strip() if '\t' in line else line.split()[0]
        entries.append((name, os.path.join(image_root, name) if image_root else name))
    return entries


def _list_lines(list_file, comments):
    """The non-blank lines of an image list (without their line ends; lines starting with
    '#' left out when `comments`); UsageError when the file does not exist."""
    if not os.path.isfile(list_file):
        raise UsageError('image list %s does not exist' % list_file)
    with open(list_file, encoding='utf-8', errors='surrogateescape') as f:
        lines = [line.rstrip('\r\n') for line in f]
    return [line for line in lines
            if line.strip() and not (comments and line.lstrip().startswith('#'))]


class ListEntry(str):
    """An image name (the path as the list wrote it) that also carries the list line's
    second field, as the original's extract_feature.py wrote it beside the feature."""

    def __new__(cls, name, second=''):
        entry = super(ListEntry, cls).__new__(cls, name)
        entry.second = second
        return entry


def original_list_entries(list_file, separator, image_root=None):
    """(ListEntry, path) per non-blank line as the original programs split their lists:
    line.split(separator) -- ' ' for extract_feature.py (`path label`), '\t' for
    image_classification.py -- the path is the first field, the second is kept
    (entry.second, '' when the line has none)."""
    entries = []
    for line in _list_lines(list_file, comments=False):
        fields = line.split(separator)
        name = ListEntry(fields[0], fields[1] if len(fields) > 1 else '')
        entries.append((name, os.path.join(image_root, name) if image_root else name))
    return entries


def directory_entries(directory):
    """(path, path) of every image file (IMAGE_EXTENSIONS) under directory, natural order."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith('.')]
        found += [os.path.join(root, name) for name in files
                  if name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith('.')]
    return [(path, path) for path in sorted(found, key=file_db.natural_key)]


def collect_images(paths=(), list_file=None, image_root=None):
    """(name, path) of every image to process, in order: the images of each path (a file,
    or a directory searched recursively), then those of the list file. A path that does not
    exist is kept: it is reported with the other unreadable images."""
    entries = []
    for path in paths:
        entries += directory_entries(path) if os.path.isdir(path) else [(path, path)]
    if list_file:
        if os.path.isdir(list_file):
            entries += directory_entries(list_file)
        else:
            entries += list_file_entries(list_file, image_root)
    if not entries:
        given = list(paths) + ([list_file] if list_file else [])
        raise UsageError('no images found in %s' % ', '.join(given) if given else
                         'no images given: name image files, directories or a list file')
    return entries


def read_image_file(path):
    with tf.io.gfile.GFile(path, 'rb') as f:
        return f.read()


# ---------------------------------------------------------------------------- class names

def load_original_class_names(path, class_num):
    """Class index -> name as the original's image_classification.py read --dictionary:
    every line split on tabs, name[int(field 0)] = field 1. With ImageNet's
    imagenet2012_dictionary.txt that is the first word of the name ('great' for 'great
    white shark'); with the ML-Images dictionary the second column, the WordNet id. Every
    class 0 .. class_num-1 must be listed (the original stopped at the first one that was
    not)."""
    if not os.path.isfile(path):
        raise UsageError('class dictionary %s does not exist' % path)
    names = {}
    with open(path, encoding='utf-8', errors='replace') as f:
        for number, line in enumerate(f, 1):
            fields = line.rstrip('\n').split('\t')
            if len(fields) < 2:
                raise errors.DataError('%s, line %d: expected "index<TAB>name", got %r'
                                        % (path, number, line.rstrip('\n')[:80]))
            names[fields[0]] = fields[1]
    missing = [i for i in range(class_num) if str(i) not in names]
    if missing:
        raise UsageError('class dictionary %s has no line for class %d (of %d)'
                         % (path, missing[0], class_num))
    return [names[str(i)] for i in range(class_num)]


# ---------------------------------------------------------------------------- output

def ranked_classes(scores, top_k, threshold=None):
    """[(rank, class, score, positive)] of the best classes of one image, best first: the
    top_k, and with a threshold (one for every class, or one per class) also every class
    with score >= its threshold (positive). Equal scores keep the lower class first, as
    tf.nn.top_k does."""
    order = np.argsort(-scores, kind='stable')
    count = min(top_k, len(scores))
    positive = None if threshold is None else scores >= np.float32(threshold)
    if positive is not None:
        listed = np.zeros(len(scores), bool)
        listed[order[:count]] = True
        order = order[listed[order] | positive[order]]
        count = len(order)
    return [(rank + 1, int(c), float(scores[c]),
             None if positive is None else bool(positive[c]))
            for rank, c in enumerate(order[:count])]


class PredictionWriter(object):
    """Formats predictions as TSV (one row per image and listed class, with a header) or
    JSON lines (one object per image).

    Multi-label (threshold given): score = sigmoid; TSV lists the top_k classes and every
    class with score >= threshold, with a 'positive' column (1/0); JSON has 'top_k' and
    'positives'. Single-label (threshold None): score = softmax probability, the top_k.
    The class name comes from the dictionary, when there is one.

    With a hierarchy (hierarchy.Hierarchy) every listed class also gets its path to the
    root, hierarchy.path_text ('dog < canine < ... < object', first synonyms): TSV column
    'path', JSON field 'path'. consistent: the scores (sigmoid or softmax alike) are
    replaced by hierarchy.consistent_scores -- s'_c = max of s over c and its descendants,
    so an ancestor never scores below a descendant -- before ranking and the threshold;
    TSV then starts with the line '# scores made consistent with <file>', and every JSON
    object has 'consistent_with': <file>.
    """

    def __init__(self, stream, fmt='tsv', top_k=DEFAULT_TOP_K, threshold=DEFAULT_THRESHOLD,
                 class_names=None, hierarchy=None, consistent=False):
        if fmt not in ('tsv', 'jsonl'):
            raise UsageError('unknown output format %r (tsv or jsonl)' % fmt)
        self.stream = stream
        self.fmt = fmt
        self.top_k = top_k
        self.threshold = threshold
        self.class_names = class_names
        if consistent and hierarchy is None:
            raise UsageError('consistent scores need a hierarchy')
        self.hierarchy, self.consistent = hierarchy, consistent
        self.count = 0

    @property
    def score_key(self):
        return 'probabilities' if self.threshold is None else 'scores'

    def header(self):
        columns = ['image', 'rank', 'class', 'score']
        if self.threshold is not None:
            columns.append('positive')
        if self.class_names is not None:
            columns.append('name')
        if self.hierarchy is not None:
            columns.append('path')
        note = ('# scores made consistent with %s\n' % self.hierarchy.path
                if self.consistent else '')
        return note + '\t'.join(columns) + '\n'

    def write(self, name, outputs):
        scores = outputs[self.score_key]
        if self.consistent:
            scores = hierarchy_lib.consistent_scores(scores, self.hierarchy)
        ranked = ranked_classes(scores, self.top_k, self.threshold)
        if self.fmt == 'tsv':
            if not self.count:
                self.stream.write(self.header())
            for rank, c, score, positive in ranked:
                fields = [name, str(rank), str(c), '%.6f' % score]
                if positive is not None:
                    fields.append('1' if positive else '0')
                if self.class_names is not None:
                    fields.append(self.class_names[c])
                if self.hierarchy is not None:
                    fields.append(self.hierarchy.path_text(c))
                self.stream.write('\t'.join(fields) + '\n')
        else:
            record = {'image': name, 'top_k': [self._entry(c, s) for rank, c, s, _ in ranked
                                               if rank <= self.top_k]}
            if self.threshold is not None:
                record['positives'] = [self._entry(c, s) for _, c, s, positive in ranked
                                       if positive]
            if self.consistent:
                record['consistent_with'] = self.hierarchy.path
            self.stream.write(json.dumps(record, ensure_ascii=False) + '\n')
        self.count += 1

    def _entry(self, c, score):
        entry = {'class': c, 'score': round(score, 6)}
        if self.class_names is not None:
            entry['name'] = self.class_names[c]
        if self.hierarchy is not None:
            entry['path'] = self.hierarchy.path_text(c)
        return entry


class OriginalClassificationWriter(object):
    """image_classification.py's text: per image `+++ the predictions of PATH is:`, then per
    class of the top_k by softmax probability `INDEX NAME: PROB` ('%d %s: %.3f'); an image
    that cannot be read or decoded gives `open pic PATH failed`. Names: a list from
    load_original_class_names, or the class index without one."""

    score_key = 'probabilities'

    def __init__(self, stream, top_k=DEFAULT_TOP_K, class_names=None):
        self.stream = stream
        self.top_k = top_k
        self.class_names = class_names
        self.count = 0

    def write(self, name, outputs):
        self.stream.write('+++ the predictions of {} is:\n'.format(name))
        for _, c, score, _ in ranked_classes(outputs[self.score_key], self.top_k):
            label = self.class_names[c] if self.class_names is not None else str(c)
            self.stream.write('%d %s: %.3f\n' % (c, label, score))
        self.count += 1

    def skip(self, name):
        self.stream.write('open pic ' + name + ' failed\n')


def original_feature_line(name, features):
    """extract_feature.py's line: `path \t second field \t f1 f2 ... fD`, each value as
    Python's str() of the float32 (the shortest text that reads back to it)."""
    second = getattr(name, 'second', '')
    values = np.asarray(features, np.float32)
    return '%s\t%s\t%s\n' % (name, second, ' '.join([str(x) for x in values]))


# ---------------------------------------------------------------------------- programs

def skip_reporter(program, counter):
    """on_skip for predict_images: one line on stderr per image that is skipped."""
    def report(name, reason):
        counter.append(name)
        sys.stderr.write('%s: skipped %s: %s\n' % (program, name, ' '.join(reason.split())))
        sys.stderr.flush()
    return report
