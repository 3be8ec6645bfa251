"""ImageNet's tar archives as the image source of make_tfrecords.py, read in place.

Layouts (each image list path names an archive key and a member):

    tars     a directory of per-synset tars, DIR/<wnid>.tar holding <wnid>_<n>.JPEG (the
             fall 2011 and winter 2021 releases); path <wnid>/<file>, or <wnid>_<n>.JPEG
    nested   ILSVRC2012_img_train.tar: a tar of the tars <wnid>.tar; paths as above
    flat     ILSVRC2012_img_val.tar: the JPEGs themselves; path <file>

Nothing is extracted. An index maps every member of an archive to (offset, size) of its
data in the file: one pass over the member headers (tarfile, which seeks over the data:
one 512-byte header read a member), made once and cached as
<out_dir>/archive_index/<key>.idx together with the archive's size and mtime (a changed
archive is indexed again). Only the archives a list names are indexed; an inner tar of
the nested layout is indexed inside the outer file at its offset, never copied out. The
parent resolves every list line through the index of its archive (one index in memory at
a time); a shard task then opens each archive it needs once and reads its members by
seek, in offset order: the bytes read are those of the shard's images and nothing else.
A list path whose archive or member is absent is "missing from the release", counted and
reported, not an error (synsets were removed after 2011).
"""
import os
import tarfile

from mlimages.cli import worker_processes
from mlimages.cli import progress as _progress
from mlimages.errors import ArchiveError

INDEX_DIR = 'archive_index'
LAYOUTS = ('tars', 'nested', 'flat')


class Source(object):
    """Where the images of a list are: layout (LAYOUTS) and path (directory or tar)."""

    def __init__(self, layout, path):
        if layout not in LAYOUTS:
            raise ValueError('layout must be one of %s, got %r' % (LAYOUTS, layout))
        self.layout = layout
        self.path = os.path.abspath(os.fspath(path))

    def split(self, image):
        """(archive key, member name) of a list path."""
        if self.layout == 'flat':
            return '', os.path.basename(image)
        head, _, tail = image.rpartition('/')
        if head:
            return os.path.basename(head), tail
        return image.partition('_')[0], image

    def file_of(self, key):
        """The file that holds archive `key`."""
        if self.layout == 'tars':
            return os.path.join(self.path, key + '.tar')
        return self.path

    def describe(self):
        return {'tars': 'the synset tars in %s', 'nested': 'the tars inside %s',
                'flat': '%s'}[self.layout] % self.path


def _stat_key(path):
    st = os.stat(path)
    return '%d\t%d' % (st.st_size, st.st_mtime_ns)


def scan_members(path, start=0, size=None):
    """[(name, data offset, size)] of the regular files of the tar that starts at byte
    `start` of file `path` (and ends within `size` bytes); names are base names."""
    found = []
    end = None if size is None else start + size
    try:
        with open(path, 'rb') as f:
            f.seek(start)
            with tarfile.open(fileobj=f, mode='r:') as tar:
                # offsets are absolute in f: tarfile counts from fileobj.tell()
                while True:
                    member = tar.next()
                    if member is None or (end is not None and member.offset >= end):
                        break
                    if member.isfile():
                        found.append((os.path.basename(member.name), member.offset_data,
                                      member.size))
                    tar.members = []  # keep memory flat over 10^5 members
    except (tarfile.TarError, EOFError) as exc:
        raise ArchiveError('%s%s: not a readable tar archive (%s)' % (
            path, ' at byte %d' % start if start else '', ' '.join(str(exc).split())))
    return found


def index_path(out_dir, key):
    return os.path.join(out_dir, INDEX_DIR, (key or '_archive') + '.idx')


def load_index(path, archive, start=0):
    """{member: (offset, size)} of a cached index, or None when it is absent or was made
    of another state of the archive."""
    try:
        with open(path, encoding='utf-8') as f:
            header = f.readline().rstrip('\n')
            if header != '# %s\t%d\t%s' % (archive, start, _stat_key(archive)):
                return None
            index = {}
            for line in f:
                name, offset, size = line.rstrip('\n').split('\t')
                index[name] = (int(offset), int(size))
            return index
    except (OSError, ValueError):
        return None


def build_index(task, report=None):
    """Index one archive (task: archive, start, size, cache) and cache it; returns the
    number of members. A pool task of make_tfrecords."""
    members = scan_members(task['archive'], task['start'], task['size'])
    cache = task['cache']
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    tmp = '%s.tmp-%d' % (cache, os.getpid())
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write('# %s\t%d\t%s\n' % (task['archive'], task['start'],
                                    _stat_key(task['archive'])))
        for name, offset, size in members:
            f.write('%s\t%d\t%d\n' % (name, offset, size))
    os.replace(tmp, cache)
    if report is not None:
        report(len(members))
    return len(members)


class _IndexProgress(_progress.ProgressLine):
    """'archives indexed done/total, members'."""

    def __init__(self, total, enabled):
        super(_IndexProgress, self).__init__(enabled)
        self.total, self.done, self.members = total, 0, 0

    def add(self, members):
        self.done += 1
        self.members += members
        self.tick()

    def done_total(self):
        return self.done, self.total

    def text(self):
        return '%d/%d archives indexed, %d members' % (self.done, self.total, self.members)


def index_all(tasks, workers, progress=True):
    """build_index for every task, `workers` processes, with a progress line."""
    meter = _IndexProgress(len(tasks), progress and bool(tasks))
    worker_processes.run_tasks(build_index, tasks, min(workers, len(tasks)), meter.add)
    if tasks:
        meter.finish()


def units(source, keys, out_dir):
    """{key: (archive file, start, size)} of the archive keys that exist in the release;
    the nested layout's outer tar is indexed (cached) to find its inner tars."""
    if source.layout == 'tars':
        found = {}
        for key in keys:
            path = source.file_of(key)
            if os.path.isfile(path):
                found[key] = (path, 0, None)
        return found
    if not os.path.isfile(source.path):
        raise ArchiveError('no such archive: %s' % source.path)
    if source.layout == 'flat':
        return {'': (source.path, 0, None)}
    outer = outer_members(source, out_dir)
    return {key: (source.path, outer[key][0], outer[key][1]) for key in keys if key in outer}


def outer_members(source, out_dir):
    """{wnid: (offset, size)} of the inner tars of a nested archive (cached index)."""
    cache = index_path(out_dir, '_outer')
    index = load_index(cache, source.path)
    if index is None:
        build_index({'archive': source.path, 'start': 0, 'size': None, 'cache': cache})
        index = load_index(cache, source.path)
    return {name[:-len('.tar')]: place for name, place in index.items()
            if name.endswith('.tar')}


def index_tasks(found, out_dir):
    """The build_index tasks of the archives in `found` (units()) without a valid cache."""
    tasks = []
    for key, (archive, start, size) in sorted(found.items()):
        cache = index_path(out_dir, key)
        if index_is_current(cache, archive, start):
            continue
        tasks.append({'archive': archive, 'start': start, 'size': size, 'cache': cache})
    return tasks


def index_is_current(cache, archive, start):
    """Whether the index cache's header names this archive, start and the archive's
    current stat (build_index wrote it): else the archive changed or was never indexed."""
    try:
        with open(cache, encoding='utf-8') as f:
            return f.readline().rstrip('\n') == '# %s\t%d\t%s' % (archive, start,
                                                                    _stat_key(archive))
    except OSError:
        return False


def read_members(source, wanted):
    """{position: bytes} for wanted = [(position, key, offset, size)]: each archive
    file opened once, the members read in offset order."""
    out = {}
    by_file = {}
    for item in wanted:
        by_file.setdefault(source.file_of(item[1]), []).append(item)
    for path, items in by_file.items():
        with open(path, 'rb') as f:
            for position, _, offset, size in sorted(items, key=lambda i: i[2]):
                f.seek(offset)
                out[position] = f.read(size)
    return out
