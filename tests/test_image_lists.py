"""Tests of tools/image_lists.py: the image-list grammar, line by line and whole lists."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from helpers import label_array, write_lines as _write
from tools import image_lists

CLASS_NUM = 12


def _expected(pairs):
    return label_array(pairs, CLASS_NUM)


def test_parse_list_line_labels():
    path, label = image_lists.parse_list_line(
        'n04310904/n04310904_8388.JPEG\t3:1 2 7:0.9\t11:-1\n', CLASS_NUM)
    assert path == 'n04310904/n04310904_8388.JPEG'
    assert label.dtype == np.float32 and label.shape == (CLASS_NUM,)
    np.testing.assert_array_equal(label, _expected([(3, 1), (2, 1), (7, 0.9), (11, -1)]))
    only_path = image_lists.parse_list_line('a.jpg', CLASS_NUM)
    assert only_path[0] == 'a.jpg' and not only_path[1].any()
    assert image_lists.parse_list_line('   \t\r\n', CLASS_NUM) is None
    # a repeated class with the same confidence is harmless
    np.testing.assert_array_equal(
        image_lists.parse_list_line('a.jpg 4:0.5 4:.5', CLASS_NUM)[1], _expected([(4, 0.5)]))


@pytest.mark.parametrize('tokens, what', [
    ('12:1', 'out of range'),
    ('-1:1', 'negative class index'),
    ('3:x', 'malformed'),
    ('abc', 'malformed'),
    ('3:', 'malformed'),
    ('3:1:1', 'malformed'),
    ('3:nan', 'malformed'),
    ('3:1.5', 'outside [-1, 1]'),
    ('3:-1.01', 'outside [-1, 1]'),
    ('3:1 3:0.5', 'twice'),
])
def test_parse_list_line_errors(tokens, what):
    with pytest.raises(image_lists.ListFormatError) as info:
        image_lists.parse_list_line('img.jpg ' + tokens, CLASS_NUM, source='lists/a.txt', lineno=7)
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith('lists/a.txt:7: ')
    assert what in str(info.value)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(0, CLASS_NUM - 1),
                       st.floats(-1, 1, allow_nan=False, width=32), max_size=CLASS_NUM),
       st.sampled_from([' ', '\t', ' \t ']))
def test_parse_list_line_round_trips(labels, sep):
    line = sep.join(['dir/img.jpg'] + ['%d:%r' % (k, float(v)) for k, v in labels.items()])
    path, label = image_lists.parse_list_line(line, CLASS_NUM)
    assert path == 'dir/img.jpg'
    np.testing.assert_array_equal(label, _expected(labels.items()))


def test_read_list_numbers_lines_and_skips_blanks(tmp_path):
    lst = _write(tmp_path / 'l.txt', ['a.jpg 1:0.5', '', 'b.jpg', '  ', 'c.jpg 2'])
    rows = image_lists.read_list(str(lst), CLASS_NUM)
    assert [(n, p) for n, p, _ in rows] == [(1, 'a.jpg'), (3, 'b.jpg'), (5, 'c.jpg')]
    np.testing.assert_array_equal(rows[2][2], _expected([(2, 1)]))
    _write(lst, ['a.jpg 1', 'b.jpg 99'])
    with pytest.raises(image_lists.ListFormatError, match=r'l\.txt:2: class index 99'):
        image_lists.read_list(str(lst), CLASS_NUM)
