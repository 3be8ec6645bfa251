"""Class names of a model's classes, from a class dictionary file (the ML-Images
dictionary, ImageNet's, tools/make_image_list.py's classes.txt, or one name a line):
what prediction lists and the evaluation's per-class report name the classes by.
"""
import os
import re

from mlimages import errors
from mlimages.errors import UsageError

ML_IMAGES_HEADER = 'category_index'
# index (optional), category id, parent index, name. Without the header line the id must be
# a WordNet id, lest a file of names such as "red 3 dogs" be taken for a dictionary.
_DICTIONARY_LINE = re.compile(r'^(?:(\d+)\s+)?(\S+)\s+(-?\d+)\s+(\S.*)$')
_HEADERLESS_LINE = re.compile(r'^(?:(\d+)\s+)?(n\d{8})\s+(-?\d+)\s+(\S.*)$')


# ImageNet's imagenet2012_dictionary.txt: `index <TAB> name words`, the words tab-separated.
_IMAGENET_LINE = re.compile(r'^(\d+)\t(.*\S.*)$')


def load_class_names(path, class_num=None):
    """Class index -> name, from a class dictionary in one of these formats:

    * ML-Images (docs/original.md, Records): an optional header line starting with 'category_index',
      then per class `index  category-id  parent-index  name` (the name may contain
      spaces; the published file also comes without header and index column:
      `WordNet-id  parent-index  name`; without the header the id must be a WordNet id);
    * ImageNet's imagenet2012_dictionary.txt: `index <TAB> words` per line, every line,
      the indices 0 .. n-1 (the name: the words joined by spaces);
    * anything else: one class name per line, line k naming class k.
    class_num, when given, must be the number of classes in the file.
    """
    if not os.path.isfile(path):
        raise UsageError('class dictionary %s does not exist' % path)
    with open(path, encoding='utf-8', errors='replace') as f:
        lines = f.read().splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    header = bool(lines) and lines[0].split()[:1] == [ML_IMAGES_HEADER]
    body = lines[1:] if header else lines
    pattern = _DICTIONARY_LINE if header else _HEADERLESS_LINE
    matches = [pattern.match(line.strip()) for line in body]
    imagenet = [_IMAGENET_LINE.match(line) for line in body] if not header else []
    if header or (body and all(matches)):
        names = _dictionary_names(path, body, matches, 2 if header else 1)
    elif body and all(imagenet) and sorted(int(m.group(1)) for m in imagenet) == \
            list(range(len(body))):
        by_index = {int(m.group(1)): m.group(2) for m in imagenet}
        names = [by_index[i] for i in range(len(body))]
    else:
        names = [line.strip() for line in body]
        for number, name in enumerate(names, 1):
            if not name:
                raise errors.DataError('%s, line %d: empty class name' % (path, number))
    names = [' '.join(name.split()) for name in names]  # no tabs in a TSV field
    if class_num is not None and len(names) != class_num:
        raise UsageError('class dictionary %s has %d classes, the model has %d'
                         % (path, len(names), class_num))
    return names


def _dictionary_names(path, body, matches, first_line_number):
    names = {}
    for number, (line, match) in enumerate(zip(body, matches), first_line_number):
        if not match:
            raise errors.DataError('%s, line %d: expected "index WordNet-id parent-index '
                                    'name", got %r' % (path, number, line[:80]))
        index = int(match.group(1)) if match.group(1) is not None else len(names)
        if index in names:
            raise errors.DataError('%s, line %d: class %d listed twice' % (path, number, index))
        names[index] = match.group(4)
    if sorted(names) != list(range(len(names))):
        raise errors.DataError('%s: class indices are not 0 .. %d' % (path, len(names) - 1))
    return [names[i] for i in range(len(names))]
