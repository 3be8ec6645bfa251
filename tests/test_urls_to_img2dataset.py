"""Tests of mlimages/recordkit/urls_to_img2dataset.py and its command: Tencent URL list ->
img2dataset's Parquet input."""
import os

import pyarrow.parquet as pq

from helpers import run_program
from mlimages.recordkit import urls_to_img2dataset as u2i

SCRIPT = os.path.join('tools', 'urls_to_img2dataset.py')


def _run(*args):
    return run_program(SCRIPT, *args, timeout=120)


def _rows(out_dir):
    rows = []
    for name in sorted(os.listdir(out_dir)):
        rows.extend(pq.read_table(os.path.join(out_dir, name)).to_pylist())
    return rows


def test_original_name_is_the_last_two_url_parts():
    assert u2i.original_name('https://farm3.staticflickr.com/2023/1234_abcd.jpg') == \
        '2023_1234_abcd.jpg'


def test_rows_keep_labels_verbatim_and_name_repeats(tmp_path):
    url_list = tmp_path / 'urls.txt'
    url_list.write_text(
        '\ufeffhttps://farm1.staticflickr.com/1/10_a_o.jpg\t5\t7:0.83\t11:-1\n'
        '\n'
        'https://farm2.staticflickr.com/1/10_a_o.jpg\t0:1\n'        # same name, other farm
        'https://farm2.staticflickr.com/2/20_b_o.png\n'             # no labels
        'http://c1.staticflickr.com/1/10_a-1_o.jpg\t3:0.5 4:1\r\n'  # spaces, CRLF
        'https://farm1.staticflickr.com/1/10_a_o.jpg\t5\n')         # the same URL again
    proc = _run(url_list, tmp_path / 'in', '--rows_per_file', 2, '--quiet')
    assert proc.returncode == 0, proc.stderr
    assert 'rows: 5 in 3 files' in proc.stdout
    assert 'given a -k suffix: 2' in proc.stdout
    assert sorted(os.listdir(tmp_path / 'in')) == [
        'part-00000.parquet', 'part-00001.parquet', 'part-00002.parquet']
    assert _rows(tmp_path / 'in') == [
        {'url': 'https://farm1.staticflickr.com/1/10_a_o.jpg', 'labels': '5\t7:0.83\t11:-1',
         'name': '1_10_a_o.jpg'},
        {'url': 'https://farm2.staticflickr.com/1/10_a_o.jpg', 'labels': '0:1',
         'name': '1_10_a_o-1.jpg'},
        {'url': 'https://farm2.staticflickr.com/2/20_b_o.png', 'labels': '',
         'name': '2_20_b_o.png'},
        {'url': 'http://c1.staticflickr.com/1/10_a-1_o.jpg', 'labels': '3:0.5 4:1',
         'name': '1_10_a-1_o.jpg'},
        {'url': 'https://farm1.staticflickr.com/1/10_a_o.jpg', 'labels': '5',
         'name': '1_10_a_o-2.jpg'},
    ]
    schema = pq.read_schema(tmp_path / 'in' / 'part-00000.parquet')
    assert [str(schema.field(c).type) for c in u2i.COLUMNS] == ['string'] * 3


def test_bad_lines_stop_before_anything_is_written(tmp_path):
    for text, what in [
            ('https://a.b/1/x.jpg\t1:1\nftp://a.b/1/y.jpg\t1\n', 'urls.txt:2: not an http'),
            ('https://a.b/1/x.jpg\t1:1\nhttps://a.b/1/y.jpg\t1:2\n', 'outside [-1, 1]'),
            ('https://a.b/1/x.jpg\tcat\n', "malformed label 'cat'"),
            ('https://a.b/1/\t1\n', 'no usable file name'),
            ('\n\n', 'no URLs in')]:
        url_list = tmp_path / 'urls.txt'
        url_list.write_text(text)
        proc = _run(url_list, tmp_path / 'in', '--quiet')
        assert proc.returncode == 2 and what in proc.stderr, (text, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1
        assert sorted(os.listdir(tmp_path)) == ['urls.txt']


def test_existing_output_is_kept_unless_overwrite(tmp_path):
    url_list = tmp_path / 'urls.txt'
    url_list.write_text('https://a.b/1/x.jpg\t1\n')
    (tmp_path / 'in').mkdir()
    proc = _run(url_list, tmp_path / 'in')
    assert proc.returncode == 2 and '--overwrite' in proc.stderr
    assert _run(url_list, tmp_path / 'in', '--overwrite', '--quiet').returncode == 0
    assert _rows(tmp_path / 'in')[0]['name'] == '1_x.jpg'
    proc = _run(url_list, tmp_path, '--overwrite')  # would delete the list itself
    assert proc.returncode == 2 and 'would hold the list' in proc.stderr
    assert url_list.exists()
    assert _run(tmp_path / 'nope.txt', tmp_path / 'x').returncode == 2
    assert _run(url_list, tmp_path / 'x', '--rows_per_file', 0).returncode == 2
