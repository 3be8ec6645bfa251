"""Image lists: one image per line, fields separated by whitespace (tabs in the published
ML-Images lists):

    <path relative to the image root> [<class>:<confidence> | <class>] ...

`<class>` is a 0-based class index and a bare `<class>` means confidence 1.0. In a line
with a tab the path is the text before the first tab (stripped), so it may hold spaces
(make_image_list.py writes such lines); without a tab it is the first field. predict.py's
lists read the path the same way (inference_io.read_list).
Confidences lie in [-1, 1]: -1 = ignore this class for this image, 0 = not annotated,
(0, 1] = confidence. Blank lines are skipped; a line with only a path is an image
without labels (all-zero label). The same class may appear twice on a line only with
the same confidence.

A bad line is mlimages.errors.ListFormatError, other bad input InputError.
"""
import os
import re

import numpy as np
from mlimages.errors import InputError, ListFormatError

# Strict token grammar: int() and float() alone would also accept '1_0', 'nan', 'inf'.
_INDEX_RE = re.compile(r'[+-]?\d+\Z')
_CONF_RE = re.compile(r'[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z')


def parse_sparse(line, class_num, source, lineno):
    """(path, {class: confidence}) for one list line, or None for a blank line."""
    path, tokens = split_line(line)
    if path is None:
        return None
    labels = {}
    for token in tokens:
        index_text, sep, conf_text = token.partition(':')
        if not _INDEX_RE.match(index_text) or (sep and not _CONF_RE.match(conf_text)):
            raise ListFormatError(
                source, lineno, 'malformed label %r (expected <class> or '
                '<class>:<confidence>)' % token)
        index = int(index_text)
        if index < 0:
            raise ListFormatError(source, lineno, 'negative class index %d in %r'
                                  % (index, token))
        if index >= class_num:
            raise ListFormatError(source, lineno, 'class index %d out of range '
                                  '(class_num is %d)' % (index, class_num))
        confidence = float(conf_text) if sep else 1.0
        if not -1.0 <= confidence <= 1.0:
            raise ListFormatError(source, lineno, 'confidence %s of class %d outside '
                                  '[-1, 1]' % (conf_text, index))
        # Compare as float32, the precision the record keeps.
        if index in labels and np.float32(labels[index]) != np.float32(confidence):
            raise ListFormatError(source, lineno, 'class %d given twice with different '
                                  'confidences (%g and %g)'
                                  % (index, labels[index], confidence))
        labels[index] = confidence
    return path, labels


def split_line(line):
    """(path, label tokens) of a list line (the module docstring's rule); (None, []) for a
    blank line."""
    if '\t' in line:
        path, rest = line.split('\t', 1)
        if path.strip():
            return path.strip(), rest.split()
    fields = line.split()
    return (fields[0], fields[1:]) if fields else (None, [])


def scan_list(path, class_num, with_offsets=False):
    """Yield (lineno, image path, {class: confidence}) for every image line of a list;
    with_offsets, (byte offset of the line, lineno, image path, labels).

    Labels stay sparse here: a dense 11166-class label per line of a large list would
    not fit in memory.
    """
    offset = 0
    with open(path, 'rb') as f:
        for lineno, raw in enumerate(f, 1):
            parsed = parse_raw_line(raw, class_num, path, lineno)
            if parsed is not None:
                yield ((offset, lineno) if with_offsets else (lineno,)) + parsed
            offset += len(raw)


def parse_raw_line(raw, class_num, path, lineno):
    """parse_sparse of one undecoded line (lineno 1 may start with a BOM)."""
    try:
        line = raw.decode('utf-8')
    except UnicodeDecodeError:
        raise ListFormatError(path, lineno, 'line is not valid UTF-8') from None
    if lineno == 1:
        line = line.lstrip('\ufeff')  # editors on Windows add a BOM
    return parse_sparse(line, class_num, path, lineno)


def find_lists(list_dir):
    """The image lists in a directory: its regular files, sorted by name.

    Hidden files (names starting with '.') are left out so editor or OS droppings do
    not become shards. Plain string order: '10.txt' sorts before '2.txt'.
    """
    names = sorted(n for n in os.listdir(list_dir) if not n.startswith('.'))
    return [os.path.join(list_dir, n) for n in names
            if os.path.isfile(os.path.join(list_dir, n))]


def resolve_lists(lists):
    """The list files of a list file, a directory of lists or a sequence of these;
    raises InputError for a missing or odd path or an empty directory."""
    if lists is None:
        lists = []
    elif isinstance(lists, (str, bytes, os.PathLike)):
        lists = [lists]
    resolved = []
    for item in lists:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = find_lists(item)
            if not found:
                raise InputError('no list files in directory %s' % item)
            resolved.extend(found)
        elif os.path.isfile(item):
            resolved.append(item)
        elif os.path.exists(item):
            raise InputError('list is not a regular file: %s' % item)
        else:
            raise InputError('no such list file: %s' % item)
    return resolved

