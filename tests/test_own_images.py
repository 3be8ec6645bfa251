"""tools/make_image_list.py (mlimages/recordkit/own_images.py, make_image_list.py): a folder
per class and a CSV to image lists and a class dictionary, every skip kind named, one class
map across splits, the exit statuses; and docs/own-images.md's commands run as written on
tiny real JPEGs."""
import io
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from PIL import Image

from helpers import ENV, ROOT, build_records, run_main
from mlimages.recordkit import make_image_list as tool
from mlimages.recordkit import own_images


def jpeg(path, seed, size=(48, 40), exif=None):
    """A small noise JPEG at path (its folder made); returns its bytes."""
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format='JPEG', quality=90,
                                 **({'exif': exif} if exif else {}))
    with open(str(path), 'wb') as f:
        f.write(out.getvalue())
    return out.getvalue()


def rotated_exif():
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to view
    return exif.tobytes()


def tree_of_every_kind(root):
    """A folder tree holding each skip kind of a folder tree once, and two good classes."""
    for i in range(3):
        jpeg(root / 'cat' / ('%d.jpg' % i), i)
        jpeg(root / 'dog' / 'sub' / ('%d.jpg' % i), 10 + i)
    good = (root / 'cat' / '0.jpg').read_bytes()
    (root / 'dog' / 'copy.jpg').write_bytes(good)                       # duplicate bytes
    (root / 'dog' / 'trunc.jpg').write_bytes(good[:len(good) // 2])     # truncated
    (root / 'cat' / 'notes.txt').write_text('not a picture')            # not an image
    (root / 'cat' / 'empty.jpg').write_bytes(b'')                       # not an image
    (root / 'cat' / 'tab\tcat.jpg').write_bytes(good[::-1])             # unusable name
    jpeg(root / 'cat' / 'my cat.jpg', 7)                                # kept: a tab ends it
    os.symlink('loop.jpg', str(root / 'cat' / 'loop.jpg'))              # unreadable
    (root / 'readme.txt').write_text('x')                               # unlisted
    (root / 'hamster').mkdir()
    (root / 'hamster' / 'bad.jpg').write_bytes(b'\xff\xd8\xff' + b'\0' * 20)  # no image
    jpeg(root / 'cat' / 'rotated.jpg', 99, exif=rotated_exif())


def read(path):
    return path.read_text().splitlines()


def test_a_folder_tree_names_every_skip_kind_and_empty_class(tmp_path, capsys):
    tree_of_every_kind(tmp_path / 'photos')
    status, out, err = run_main(tool, capsys, '--image_root', tmp_path / 'photos',
                                '--out', tmp_path / 'lists' / 'train.txt', '--quiet')
    assert status == 0
    skipped = sorted(line for line in err if ': skipped ' in line)
    assert skipped == sorted([
        "make_image_list.py: skipped readme.txt: unlisted (not in a class folder)",
        "make_image_list.py: skipped cat/tab\tcat.jpg: unusable name (a tab, a line break or "
        "a space at either end, which an image list cannot hold: rename the file)",
        "make_image_list.py: skipped cat/empty.jpg: not an image (empty file (0 bytes))",
        "make_image_list.py: skipped cat/loop.jpg: unreadable (Too many levels of symbolic "
        "links)",
        "make_image_list.py: skipped cat/notes.txt: not an image (not an image Pillow can "
        "identify)",
        "make_image_list.py: skipped dog/copy.jpg: duplicate bytes (same bytes as "
        "cat/0.jpg)",
    ] + [line for line in skipped if 'trunc.jpg' in line or 'hamster/bad.jpg' in line])
    assert [l for l in skipped if 'dog/trunc.jpg' in l][0].startswith(
        'make_image_list.py: skipped dog/trunc.jpg: truncated or corrupt (cannot decode')
    assert [l for l in skipped if 'hamster/bad.jpg' in l] == [
        'make_image_list.py: skipped hamster/bad.jpg: not an image (not an image Pillow can '
        'identify)']
    assert "make_image_list.py: empty class 'hamster': no image kept (1 file skipped)" in err
    assert len(skipped) == 8
    assert read(tmp_path / 'lists' / 'classes.txt') == ['0\tcat', '1\tdog']
    assert read(tmp_path / 'lists' / 'train.txt') == [
        'cat/0.jpg\t0', 'cat/1.jpg\t0', 'cat/2.jpg\t0', 'cat/my cat.jpg\t0',
        'cat/rotated.jpg\t0',
        'dog/sub/0.jpg\t1', 'dog/sub/1.jpg\t1', 'dog/sub/2.jpg\t1']
    lines = out.splitlines()
    assert lines[1] == ('files skipped: 8, duplicate bytes 1, not an image 3, truncated or '
                        'corrupt 1, unlisted 1, unreadable 1, unusable name 1')
    assert lines[2] == "empty classes: 1, 'hamster'"
    assert lines[3].startswith('EXIF orientation other than 1: 1 image (e.g. cat/rotated.jpg)'
                               ', kept unrotated')
    assert lines[-1] == 'next: make_tfrecords.py --image_root %s --class_num 2 ' \
        '--label_type single' % (tmp_path / 'photos')
    # what the list keeps, make_tfrecords stores: every line a record, nothing skipped
    summary = build_records(
        [str(tmp_path / 'lists' / 'train.txt')], str(tmp_path / 'photos'),
        str(tmp_path / 'data'), class_num=2, workers=1, progress=False, single_label=True)
    assert summary['images_written'] == 8 and summary['images_skipped'] == 0


CSV = ('path,labels,comment\n'
       'a.jpg,sea;sand:0.8; ,first\n'
       '"sub/b,c.jpg",street;car:-1,a comma in a quoted path\n'
       './a.jpg,sea,the same file again\n'
       'gone.jpg,sea,\n'
       '%s,sky:0,absolute\n'
       'no label.jpg,,\n')


def write_csv(tmp_path):
    jpeg(tmp_path / 'a.jpg', 1)
    jpeg(tmp_path / 'sub' / 'b,c.jpg', 2)
    jpeg(tmp_path / 'abs' / 'd.jpg', 3)
    jpeg(tmp_path / 'no label.jpg', 4)
    (tmp_path / 'labels.csv').write_text(CSV % (tmp_path / 'abs' / 'd.jpg'))
    return tmp_path / 'labels.csv'


def test_a_csv_becomes_a_multi_label_list(tmp_path, capsys):
    csv_path = write_csv(tmp_path)
    status, out, err = run_main(tool, capsys, '--csv', csv_path, '--out',
                                tmp_path / 'out' / 'list.txt', '--quiet')
    assert status == 0
    assert err == [
        'make_image_list.py: skipped labels.csv:4 ./a.jpg: duplicate path (the file of '
        'line 2)',
        'make_image_list.py: skipped labels.csv:5 gone.jpg: missing (no such file)']
    assert read(tmp_path / 'out' / 'classes.txt') == [
        '0\tcar', '1\tsand', '2\tsea', '3\tsky', '4\tstreet']
    assert read(tmp_path / 'out' / 'list.txt') == [
        'a.jpg\t1:0.8\t2', 'sub/b,c.jpg\t0:-1\t4', '%s\t3:0' % (tmp_path / 'abs' / 'd.jpg'),
        'no label.jpg\t']
    summary = build_records(
        [str(tmp_path / 'out' / 'list.txt')], str(tmp_path), str(tmp_path / 'data'),
        class_num=5, workers=1, progress=False)
    assert summary['images_written'] == 4 and summary['images_skipped'] == 0
    assert out.splitlines()[-1] == 'next: make_tfrecords.py --image_root %s --class_num 5' \
        % tmp_path


@pytest.mark.parametrize('text,message', [
    ('file,labels\na.jpg,x\n', 'the first line must be the header path,labels'),
    ('path,labels\na.jpg,x:1.5\n', 'labels.csv:2: confidence 1.5 of \'x\' outside [-1, 1]'),
    ('path,labels\na.jpg,x:1;x:0.5\n', "labels.csv:2: label 'x' given twice with different"),
    ('path,labels\na.jpg,x,extra\n', 'labels.csv:2: 3 fields, the header has 2'),
    ('path,labels\n,x\n', 'labels.csv:2: empty path'),
    ('path,labels\na.jpg,:0.5\n', "labels.csv:2: label ':0.5' has no class name")])
def test_a_malformed_csv_is_one_line_and_exit_2_with_nothing_written(tmp_path, capsys, text,
                                                                      message):
    jpeg(tmp_path / 'a.jpg', 0)
    (tmp_path / 'labels.csv').write_text(text)
    status, _, err = run_main(tool, capsys, '--csv', tmp_path / 'labels.csv', '--out',
                              tmp_path / 'out' / 'list.txt', '--quiet')
    assert status == 2 and len(err) == 1
    assert err[0].startswith('make_image_list.py: error: ') and message in err[0]
    assert not (tmp_path / 'out').exists()


def test_val_fraction_is_deterministic_and_one_class_map_serves_both_splits(tmp_path, capsys):
    for c, count in (('a', 10), ('b', 4), ('c', 1)):
        for i in range(count):
            jpeg(tmp_path / 'photos' / c / ('%d.jpg' % i), ord(c) * 100 + i)
    args = ['--image_root', tmp_path / 'photos', '--val_fraction', '0.25', '--quiet']
    for run in ('one', 'two'):
        assert run_main(tool, capsys, '--out', tmp_path / run / 'train.txt', '--val_out',
                        tmp_path / run / 'val.txt', *args)[0] == 0
    train, val = read(tmp_path / 'one' / 'train.txt'), read(tmp_path / 'one' / 'val.txt')
    assert (train, val) == (read(tmp_path / 'two' / 'train.txt'),
                            read(tmp_path / 'two' / 'val.txt'))
    assert sorted(train + val) == sorted('%s/%d.jpg\t%d' % (c, i, k) for k, (c, n) in
                                         enumerate((('a', 10), ('b', 4), ('c', 1)))
                                         for i in range(n))
    # round(n x 0.25) of each class, at least one left to train
    assert [sum(l.startswith(c) for l in val) for c in 'abc'] == [3, 1, 0]
    assert run_main(tool, capsys, '--out', tmp_path / 'seed' / 'train.txt', '--val_out',
                    tmp_path / 'seed' / 'val.txt', '--seed', 7, *args)[0] == 0
    assert read(tmp_path / 'seed' / 'val.txt') != val

    # A validation tree of its own, numbered through the training run's dictionary:
    # 'b' is class 1 though 'a' has no image here; 'zebra' is unknown.
    jpeg(tmp_path / 'val_photos' / 'b' / 'x.jpg', 500)
    jpeg(tmp_path / 'val_photos' / 'zebra' / 'z.jpg', 501)
    status, out, err = run_main(tool, capsys, '--image_root', tmp_path / 'val_photos', '--out',
                                tmp_path / 'one' / 'val2.txt', '--class_dict_in',
                                tmp_path / 'one' / 'classes.txt', '--quiet')
    assert status == 0
    assert read(tmp_path / 'one' / 'val2.txt') == ['b/x.jpg\t1']
    assert err == ["make_image_list.py: skipped zebra/z.jpg: unknown class ('zebra' is not "
                   "in --class_dict_in)",
                   "make_image_list.py: empty class 'a': no file",
                   "make_image_list.py: empty class 'c': no file"]
    assert read(tmp_path / 'one' / 'classes.txt') == ['0\ta', '1\tb', '2\tc']


@pytest.mark.parametrize('args,message', [
    (['--out', 'l.txt'], 'one of the arguments --image_root --csv is required'),
    (['--image_root', 'p', '--csv', 'c.csv', '--out', 'l.txt'], 'not allowed with'),
    (['--image_root', 'p', '--out', 'l.txt', '--val_fraction', '0.1'],
     '--val_fraction 0.1 needs --val_out LIST'),
    (['--image_root', 'p', '--out', 'l.txt', '--val_out', 'v.txt'],
     '--val_out needs --val_fraction F > 0'),
    (['--image_root', 'p', '--out', 'l.txt', '--val_fraction', '1'], 'must be in [0, 1)'),
    (['--image_root', 'p', '--out', 'l.txt', '--val_out', 'l.txt', '--val_fraction', '0.5'],
     'must be different files'),
    (['--image_root', 'nowhere', '--out', 'l.txt'], '--image_root nowhere is not a directory'),
    (['--image_root', 'p', '--out', 'l.txt', '--class_dict_in', 'p/cat/0.jpg'],
     'cannot read --class_dict_in p/cat/0.jpg (a dictionary of make_image_list.py)'),
    (['--image_root', 'p', '--out', 'l.txt', '--class_dict_in', 'p/names.txt'],
     'p/names.txt, line 1: expected "0<TAB>name" (a dictionary of make_image_list.py)')])
def test_bad_usage_is_exit_2_with_nothing_written(tmp_path, capsys, monkeypatch, args,
                                                  message):
    monkeypatch.chdir(tmp_path)
    jpeg(tmp_path / 'p' / 'cat' / '0.jpg', 0)
    (tmp_path / 'p' / 'names.txt').write_text('cat\n')
    status, out, err = run_main(tool, capsys, *args)
    assert status == 2 and message in err[-1], err
    assert sorted(os.listdir(str(tmp_path))) == ['p']


def test_nothing_kept_is_exit_1_with_nothing_written(tmp_path, capsys):
    (tmp_path / 'photos' / 'cat').mkdir(parents=True)
    (tmp_path / 'photos' / 'cat' / 'a.jpg').write_text('text')
    status, out, err = run_main(tool, capsys, '--image_root', tmp_path / 'photos', '--out',
                                tmp_path / 'out' / 'list.txt', '--quiet')
    assert status == 1
    assert err == ['make_image_list.py: skipped cat/a.jpg: not an image (not an image Pillow '
                   'can identify)',
                   "make_image_list.py: empty class 'cat': no image kept (1 file skipped)",
                   'make_image_list.py: error: no image kept of 1 files; nothing written']
    assert not (tmp_path / 'out').exists()


def test_files_are_checked_by_worker_processes_in_list_order(tmp_path):
    """More files than a chunk, two processes: the same verdicts in the same order."""
    files = []
    for i in range(own_images.CHUNK + 3):
        files.append(str(tmp_path / ('%d.jpg' % i)))
        jpeg(files[-1], i % 5)  # five distinct images, the rest duplicates by bytes
    entries = [own_images.Entry(os.path.basename(f), f, {'x': 1.0}, f) for f in files]
    from mlimages.cli import worker_processes
    kept, skips, _ = own_images.check_entries(
        entries, lambda f, t, p: worker_processes.run_tasks(f, t, 2, p))
    assert [e.path for e in kept] == ['%d.jpg' % i for i in range(5)]
    assert len(skips) == own_images.CHUNK - 2 and skips[0][1] == 'duplicate bytes'


# ------------------------------------------------------- docs/own-images.md, as written

PAGE = os.path.join(ROOT, 'docs', 'own-images.md')
# The page's training runs at a size for a test: a small network, a few steps.
SMALL = ['--resnet_size=18', '--image_size=32', '--batch_size=4', '--max_iter=2',
         '--snapshot=2', '--log_interval=1']


def page_commands():
    """The command lines of the page's code blocks, in order, as tokens after
    `.venv/bin/python` (test_docs_commands parses each of them, the inline ones too); a
    command wrapped over several lines is one."""
    with open(PAGE) as f:
        text = f.read().replace('\\\n', ' ')  # a command wrapped with a trailing backslash
    return [shlex.split(line)[1:] for line in text.splitlines()
            if line.strip().startswith('.venv/bin/python ')]


def write_user_tree(root):
    """10 classes of 5 tiny JPEGs (the page's --class_num 10), a CSV of 20 labels over them
    (its --class_num 20), two new photos, and a 'published checkpoint' of ResNet-18."""
    classes = ['class %d' % k for k in range(10)]  # spaces in every path
    rows = ['path,labels']
    for k, name in enumerate(classes):
        for i in range(5):
            jpeg(root / 'photos' / name / ('%d.jpg' % i), 10 * k + i)
            rows.append('%s/%d.jpg,tag_%02d;tag_%02d:0.7' % (name, i, (k + i) % 20,
                                                              (k + i + 10) % 20))
    (root / 'photos' / 'labels.csv').write_text('\n'.join(rows) + '\n')
    jpeg(root / 'new_photos' / 'a.jpg', 900)
    jpeg(root / 'new_photos' / 'b.jpg', 901, size=(60, 40))
    import resnet
    with tf.Graph().as_default():
        resnet.ResNet(18, 3)(tf.zeros([1, 32, 32, 3]), training=True)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver().save(session, str(root / 'ckpt-resnet101-mlimages' / 'model.ckpt'),
                                  write_meta_graph=False)


def run_page_command(tokens, capsys):
    """A tool's main() in this process (the same parse as the command), train.py as a
    program (with SMALL added to a training run); returns (status, stdout, stderr)."""
    program = tokens[0]
    if program == 'train.py':
        mode = [t for t in tokens if t.startswith('--mode=')]
        extra = SMALL if not mode else []
        result = subprocess.run([sys.executable, os.path.join(ROOT, 'train.py')] + tokens[1:]
                                + extra, env=ENV, capture_output=True, text=True, timeout=600)
        return result.returncode, result.stdout, result.stderr
    if program == 'tools/make_tfrecords.py':
        from mlimages.recordkit import make_command as module
    elif program == 'tools/predict.py':
        from mlimages.cli import predict as module
    else:
        assert program == 'tools/make_image_list.py', program
        module = tool
    status = module.main(tokens[1:])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_pages_commands_for_images_already_split(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for split, count in (('train', 3), ('val', 1)):
        for k in range(3):
            for i in range(count):
                jpeg(tmp_path / 'photos' / split / ('c%d' % k) / ('%d.jpg' % i), 9 * k + i)
    for tokens in page_commands()[1:3]:
        assert tokens[1:3] == ['--image_root', 'photos/' + tokens[2].split('/')[-1]]
        assert run_page_command(tokens, capsys)[0] == 0
    assert read(tmp_path / 'my_data' / 'classes.txt') == ['0\tc0', '1\tc1', '2\tc2']
    assert read(tmp_path / 'my_data' / 'val.txt') == ['c0/0.jpg\t0', 'c1/0.jpg\t1',
                                                      'c2/0.jpg\t2']


@pytest.mark.slow
def test_the_pages_commands_take_a_folder_of_jpegs_to_a_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_user_tree(tmp_path)
    commands = page_commands()
    assert [c[0] for c in commands] == (
        ['tools/make_image_list.py'] * 3 + ['tools/make_tfrecords.py'] * 2 + ['train.py'] * 3 +
        ['tools/predict.py', 'tools/make_image_list.py'] + ['tools/make_tfrecords.py'] * 2 +
        ['train.py'])
    del commands[1:3]  # the already-split tree's: the test above
    # The folder's way, sections 2-5; the CSV's (section 6) up to its records: its training
    # run is the multi-label one of tests/test_published_checkpoint.py.
    for tokens in commands[:10]:
        status, out, err = run_page_command(tokens, capsys)
        assert status == 0, (tokens, err[-3000:])
        if tokens[0] == 'train.py' and '--mode=eval' in tokens:
            assert re.search(r'evaluated my_model/model.ckpt-2 .*accuracy = ', err), err[-2000:]
        if tokens[0] == 'tools/predict.py':
            rows = [line.split('\t') for line in out.splitlines()]
            assert rows[0] == ['image', 'rank', 'class', 'score', 'name']
            assert len(rows) == 1 + 2 * 3
            assert {row[4] for row in rows[1:]} <= {'class %d' % k for k in range(10)}
    assert len(read(tmp_path / 'my_data' / 'val.txt')) == 10  # round(5 x 0.1) = 1 a class
    assert os.listdir(str(tmp_path / 'my_export'))  # a SavedModel version
    train = tf.train.Example.FromString(next(tf.io.tf_record_iterator(
        str(tmp_path / 'my_data' / 'train' / '0.tfrecords'))))
    assert train.features.feature['label'].int64_list.value[0] in range(10)
    assert len(read(tmp_path / 'my_tags' / 'classes.txt')) == 20
    assert os.path.exists(str(tmp_path / 'my_tags' / 'val' / '0.tfrecords'))


@pytest.mark.matrix
def test_the_pages_csv_training_run(tmp_path, monkeypatch, capsys):
    """Section 6's training command on its records (multi-label from the CSV)."""
    monkeypatch.chdir(tmp_path)
    write_user_tree(tmp_path)
    commands = page_commands()
    for tokens in commands[9:]:
        status, _, err = run_page_command(tokens, capsys)
        assert status == 0, (tokens, err[-3000:])
    assert 'new head of 20 classes' in err


def test_a_folder_link_cycle_is_walked_once_and_a_non_utf8_name_is_named(tmp_path, capsys):
    jpeg(tmp_path / 'photos' / 'cat' / 'a.jpg', 0)
    os.symlink('..', str(tmp_path / 'photos' / 'cat' / 'up'))  # cat/up/cat/up/... a cycle
    name = os.fsdecode(b'\xff.jpg')
    jpeg(tmp_path / 'photos' / 'cat' / name, 1)
    status, out, err = run_main(tool, capsys, '--image_root', tmp_path / 'photos', '--out',
                                tmp_path / 'list.txt', '--quiet')
    assert status == 0
    assert read(tmp_path / 'list.txt') == ['cat/a.jpg\t0']
    assert err == ['make_image_list.py: skipped cat/?.jpg: unusable name (not UTF-8, which '
                   'image lists are: rename the file)']
