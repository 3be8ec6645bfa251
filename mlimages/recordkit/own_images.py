"""A user's own images -> an image list for make_tfrecords.py and its class dictionary.

Two sources:

  folder tree (--image_root ROOT, single-label): ROOT/<class>/**/<file>; every file under a
    class folder, subfolders included, is an image of that class. The list's paths are
    relative to ROOT (make_tfrecords.py --image_root ROOT), one class a line.
  CSV (--csv FILE, multi-label): a header with the columns `path` and `labels` (others are
    ignored); labels `;`-separated, each `name` (confidence 1) or `name:confidence` in
    [-1, 1] (-1 ignore, 0 not annotated), as the list format. A relative path is relative
    to the CSV's folder (make_tfrecords.py --image_root that folder), an absolute one is
    kept. A row without labels is an image without any (all-zero label).

Classes are numbered in the sorted order of their names (Python's string order: '10' before
'9'), and the dictionary is written as `index<TAB>name` a line -- ImageNet's
imagenet2012_dictionary.txt format, which predict.py --class_dict reads (any --format).
With --class_dict_in the classes are those of a dictionary written before (the train run's):
validation lists share its indices, and an image of a class it lacks is skipped.

Every file is read and decoded in full, as make_tfrecords.py will (images.downscale), and
skipped with one line naming it and why -- the kinds, each counted in the summary:

  unreadable           the file cannot be read (permissions, I/O error)
  missing              a CSV row's file does not exist
  not an image         empty, or not a format Pillow identifies
  truncated or corrupt Pillow identifies it but cannot decode it to the end
  too large            more pixels than Pillow decodes (its decompression-bomb limit)
  duplicate path       a CSV row naming a file an earlier row named (the same real path)
  duplicate bytes      the same bytes as a file kept earlier (sha256; the first is kept,
                       in list order: sorted paths, or the CSV's rows)
  unlisted             a file directly in ROOT, outside every class folder
  unusable name        a tab or line break in the path, a space at either end, or a name
                       that is not UTF-8: an image list cannot hold it (spaces inside a
                       path are fine: a tab ends it, image_lists.py)
  unknown class        a class --class_dict_in does not have

and every class left without an image is named (an "empty class", left out of a written
dictionary). Nothing is rotated: an image with an EXIF orientation other than 1 is kept
as its pixels are stored, as make_tfrecords.py stores it and train.py and predict.py read
it (TensorFlow's decoders ignore EXIF); the summary counts such images and names one.

--val_fraction F holds out a deterministic share of the kept images (after duplicates are
dropped, so no image is in both lists): the images of each class (single-label) or all of
them (CSV) shuffled by random.Random(--seed), round(n x F) of each group to the val list,
at least one left for training. Both lists and the dictionary are written atomically (a
temporary file renamed when complete).
"""
import csv
import hashlib
import io
import os
import random
import re

from PIL import Image

from mlimages.cli import worker_processes
from mlimages.cli import progress as _progress
from mlimages.errors import AllImagesSkippedError, BadImageError, InputError
from mlimages.files import atomic_output
from mlimages.recordkit import images

CHUNK = 64  # files checked per task of a worker process
_CONFIDENCE = re.compile(r'[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z')
_ORIENTATION = 0x0112  # the EXIF tag


class Entry(object):
    """One candidate image: `path` as the list will hold it, `file` where it is read,
    `labels` {class name: confidence}, `where` how the skip line names it."""
    __slots__ = ('path', 'file', 'labels', 'where')

    def __init__(self, path, file, labels, where):
        self.path, self.file, self.labels, self.where = path, file, labels, where


def folder_entries(root):
    """(entries, skips, class names) of a folder-per-class tree; skips are (where, kind,
    detail). Folders and files in sorted order; symlinks followed."""
    if not os.path.isdir(root):
        raise InputError('--image_root %s is not a directory' % root)
    entries, skips, classes = [], [], []
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        if not os.path.isdir(full):
            skips.append((name, 'unlisted', 'not in a class folder'))
            continue
        classes.append(' '.join(name.split()))
        seen = set()
        for folder, dirs, files in os.walk(full, followlinks=True):
            seen.add(os.path.realpath(folder))  # a linked folder is walked once: no cycles
            dirs[:] = sorted(d for d in dirs
                             if os.path.realpath(os.path.join(folder, d)) not in seen)
            for file in sorted(files):
                path = os.path.relpath(os.path.join(folder, file), root).replace(os.sep, '/')
                entries.append(Entry(path, os.path.join(folder, file),
                                     {' '.join(name.split()): 1.0}, path))
    if not classes:
        raise InputError('--image_root %s has no class folders (expected ROOT/<class>/'
                         '<image>)' % root)
    return entries, skips, classes


def parse_labels(text, where):
    """{name: confidence} of a CSV labels field; InputError naming `where` if malformed."""
    labels = {}
    for token in text.split(';'):
        token = token.strip()
        if not token:
            continue
        name, sep, value = token.rpartition(':')
        if not sep or not _CONFIDENCE.match(value.strip()):
            name, value = token, '1'
        name = ' '.join(name.split())
        confidence = float(value)
        if not name:
            raise InputError('%s: label %r has no class name' % (where, token))
        if not -1.0 <= confidence <= 1.0:
            raise InputError('%s: confidence %s of %r outside [-1, 1]'
                             % (where, value.strip(), name))
        if labels.get(name, confidence) != confidence:
            raise InputError('%s: label %r given twice with different confidences'
                             % (where, name))
        labels[name] = confidence
    return labels


def csv_entries(path):
    """(entries, skips, class names) of a CSV of `path,labels`; its malformed rows are
    InputError (nothing is written then)."""
    base = os.path.dirname(os.path.abspath(path))
    try:
        with open(path, newline='', encoding='utf-8-sig') as f:
            rows = list(csv.reader(f))
    except FileNotFoundError:
        raise InputError('no such CSV file: %s' % path) from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError('cannot read CSV %s: %s' % (path, exc)) from None
    header = [column.strip().lower() for column in rows[0]] if rows else []
    if 'path' not in header or 'labels' not in header:
        raise InputError('%s: the first line must be the header path,labels, got %r'
                         % (path, ','.join(rows[0]) if rows else ''))
    at, labels_at = header.index('path'), header.index('labels')
    entries, skips, seen, classes = [], [], {}, set()
    for number, row in enumerate(rows[1:], 2):
        where = '%s:%d' % (os.path.basename(path), number)
        if not any(field.strip() for field in row):
            continue
        if len(row) != len(header):
            raise InputError('%s: %d fields, the header has %d' % (where, len(row),
                                                                   len(header)))
        image = row[at].strip()
        if not image:
            raise InputError('%s: empty path' % where)
        labels = parse_labels(row[labels_at], where)
        classes.update(labels)
        where += ' ' + image
        file = os.path.join(base, image)
        key = os.path.realpath(file)
        if key in seen:
            skips.append((where, 'duplicate path', 'the file of line %d' % seen[key]))
            continue
        seen[key] = number
        entries.append(Entry(os.path.normpath(image).replace(os.sep, '/'), file, labels,
                             where))
    return entries, skips, sorted(classes)


def check_file(file):
    """('ok', sha256 hex, EXIF orientation) of an image file make_tfrecords.py can store,
    ('skip', kind, detail) of any other (the module docstring's kinds)."""
    try:
        with open(file, 'rb') as f:
            data = f.read()
    except FileNotFoundError:
        return ('skip', 'missing', 'no such file')
    except IsADirectoryError:
        return ('skip', 'not an image', 'a directory')
    except OSError as exc:
        return ('skip', 'unreadable', exc.strerror or type(exc).__name__)
    if not data:
        return ('skip', 'not an image', 'empty file (0 bytes)')
    try:
        images.downscale(data, 0)  # decodes it whole, as make_tfrecords.py will
    except BadImageError as exc:
        reason = str(exc)
        kind = ('not an image' if reason.startswith('not an image') else 'too large'
                if reason.startswith('too many pixels') else 'truncated or corrupt')
        return ('skip', kind, reason)
    try:
        orientation = Image.open(io.BytesIO(data)).getexif().get(_ORIENTATION, 1)
    except Exception:  # a broken EXIF block: the pixels decode, so the image is kept
        orientation = 1
    return ('ok', hashlib.sha256(data).hexdigest(), orientation)


def check_chunk(files, on_progress=None):
    """check_file of each file (a task of worker_processes.run_tasks)."""
    results = [check_file(file) for file in files]
    if on_progress is not None:
        on_progress(len(files))
    return results


class _Progress(_progress.ProgressLine):
    """'files checked/total, files/s'."""

    def __init__(self, total, enabled):
        super(_Progress, self).__init__(enabled)
        self.total, self.done = total, 0

    def add(self, count):
        self.done += count
        self.tick()

    def done_total(self):
        return self.done, self.total

    def text(self):
        return '%d/%d files checked, %.1f files/s' % (self.done, self.total,
                                                      self.rate(self.done))


def check_entries(entries, run_tasks, progress=False):
    """(kept entries, skips, EXIF-rotated paths): each file checked once
    (run_tasks(check_chunk, chunks, on_progress), in list order), duplicates by bytes
    dropped after the first."""
    candidates, skips = [], []
    for entry in entries:
        if re.search(r'[\t\n\r\f\v]', entry.path) or entry.path != entry.path.strip():
            skips.append((entry.where, 'unusable name', 'a tab, a line break or a space at '
                          'either end, which an image list cannot hold: rename the file'))
        elif not _utf8(entry.path):
            skips.append((entry.where.encode('utf-8', 'replace').decode('utf-8'),
                          'unusable name', 'not UTF-8, which image lists are: rename the '
                          'file'))
        else:
            candidates.append(entry)
    meter = _Progress(len(candidates), progress)
    chunks = [[e.file for e in candidates[i:i + CHUNK]]
              for i in range(0, len(candidates), CHUNK)]
    results = [r for chunk in run_tasks(check_chunk, chunks, meter.add) for r in chunk]
    if candidates:
        meter.finish()
    kept, first, rotated = [], {}, []
    for entry, result in zip(candidates, results):
        if result[0] == 'skip':
            skips.append((entry.where, result[1], result[2]))
        elif result[1] in first:
            skips.append((entry.where, 'duplicate bytes', 'same bytes as ' + first[result[1]]))
        else:
            first[result[1]] = entry.where
            kept.append(entry)
            if result[2] != 1:
                rotated.append(entry.path)
    return kept, skips, rotated


def _utf8(text):
    try:
        text.encode('utf-8')
    except UnicodeEncodeError:  # a file name of other bytes, as os.listdir escapes it
        return False
    return True


def natural_key(text):
    """'labels.csv:9' before 'labels.csv:10': the skip lines in list order."""
    return [int(part) if part.isdigit() else part for part in re.split(r'(\d+)', text)]


def read_dictionary(path):
    """The class names of a dictionary this module wrote (`index<TAB>name`, 0 .. n-1)."""
    try:
        with open(path, encoding='utf-8') as f:
            lines = [line.rstrip('\n') for line in f if line.strip()]
    except FileNotFoundError:
        raise InputError('no such --class_dict_in file: %s' % path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError('cannot read --class_dict_in %s (a dictionary of make_image_list.py'
                         '): %s' % (path, exc)) from None
    names = []
    for number, line in enumerate(lines, 1):
        index, tab, name = line.partition('\t')
        if not tab or index != str(number - 1) or not name.strip():
            raise InputError('%s, line %d: expected "%d<TAB>name" (a dictionary of '
                             'make_image_list.py), got %r' % (path, number, number - 1,
                                                             line[:80]))
        names.append(' '.join(name.split()))
    if not names:
        raise InputError('--class_dict_in %s has no classes' % path)
    return names


def map_classes(kept, skips, given):
    """(class names, kept entries of known classes): `given` (a read dictionary) or the
    sorted names of the classes that kept an image; an image of a class not in `given`
    becomes an 'unknown class' skip."""
    if given is None:
        return sorted({name for entry in kept for name in entry.labels}), kept
    known, known_kept = set(given), []
    for entry in kept:
        unknown = sorted(set(entry.labels) - known)
        if unknown:
            skips.append((entry.where, 'unknown class', '%r is not in --class_dict_in'
                          % unknown[0]))
        else:
            known_kept.append(entry)
    return given, known_kept


def split(kept, val_fraction, seed, by_class):
    """(train, val) entries: round(n x val_fraction) of each class (by_class) or of all,
    shuffled with random.Random(seed), at least one of each group left for training; the
    lists keep the input order."""
    if not val_fraction:
        return kept, []
    groups = {}
    for position, entry in enumerate(kept):
        key = min(entry.labels) if by_class and entry.labels else ''
        groups.setdefault(key, []).append(position)
    rng, held = random.Random(seed), set()
    for key in sorted(groups):
        members = groups[key]
        rng.shuffle(members)
        held.update(members[:min(len(members) - 1, int(len(members) * val_fraction + 0.5))])
    return ([e for i, e in enumerate(kept) if i not in held],
            [e for i, e in enumerate(kept) if i in held])


def list_line(entry, index):
    """`<path><TAB><class>[:<confidence>] ...` (classes ascending, a bare class = 1)."""
    labels = sorted((index[name], value) for name, value in entry.labels.items())
    line = '\t'.join([entry.path] + ['%d' % c if v == 1.0 else '%d:%.6g' % (c, v)
                                     for c, v in labels])
    return line + '\t' if not labels and ' ' in entry.path else line  # the tab ends the path


def write_outputs(outputs, names, dictionary_path):
    """Each (path, entries) of `outputs` as an image list, and the dictionary of `names`
    unless dictionary_path is None: all atomic, after every check."""
    index = {name: i for i, name in enumerate(names)}
    for path, entries in outputs:
        with atomic_output(path) as f:
            for entry in entries:
                f.write(list_line(entry, index) + '\n')
    if dictionary_path is not None:
        with atomic_output(dictionary_path) as f:
            for i, name in enumerate(names):
                f.write('%d\t%s\n' % (i, name))


def make_image_list(out, image_root=None, csv_path=None, val_out=None, val_fraction=0.0,
                    seed=0, class_dict_out=None, class_dict_in=None, workers=1,
                    progress=False):
    """Write the image list(s) and dictionary of a folder tree (image_root) or a CSV
    (csv_path), the module docstring's rules; returns the summary dict: outputs [(path,
    images)], classes (names), dictionary (the path written or read), skips [(where,
    kind, detail)], empty [(class, files skipped)], rotated (paths), image_root (for
    make_tfrecords.py), single_label. Raises InputError for bad input (nothing written)
    and AllImagesSkippedError (nothing written) when no image is kept."""
    given = read_dictionary(class_dict_in) if class_dict_in else None
    if image_root is not None:
        entries, skips, universe = folder_entries(image_root)
        root = image_root
    else:
        entries, skips, universe = csv_entries(csv_path)
        root = os.path.dirname(csv_path) or '.'
    kept, checked_skips, rotated = check_entries(
        entries, lambda f, t, p: worker_processes.run_tasks(f, t, workers, p), progress)
    skips += checked_skips
    names, kept = map_classes(kept, skips, given)
    skips.sort(key=lambda skip: natural_key(skip[0]))
    found = {name for entry in kept for name in entry.labels}
    empty = [(name, sum(1 for e in entries if name in e.labels))
             for name in (given or universe) if name not in found]
    train, val = split(kept, val_fraction, seed, image_root is not None)
    summary = {'outputs': [(out, len(train))] + ([(val_out, len(val))] if val_out else []),
               'classes': names, 'skips': skips, 'empty': empty, 'rotated': rotated,
               'image_root': root, 'single_label': image_root is not None,
               'dictionary': class_dict_in or class_dict_out}
    if not kept:
        raise AllImagesSkippedError('no image kept of %d files' % len(entries), summary)
    for path, _ in summary['outputs'] + [(class_dict_out, 0)]:
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_outputs([(out, train)] + ([(val_out, val)] if val_out else []), names,
                  None if class_dict_in else class_dict_out)
    return summary
