"""inference_io.py: class dictionaries (the ML-Images, ImageNet and one-name layouts, and
the original programs' reading), image lists and directories, ranking, the TSV / JSON-lines
and the original programs' output formats."""
import json
import os

import numpy as np
import pytest

from mlimages import errors
from mlimages.inference import inference_io
from helpers import empty_dir, write_text

ML_IMAGES_DICT = ('category_index\tcategory_id\tindex_of_parent_category\tcategory name\n'
                  '0\tn00002452\t-1\tthing\n'
                  '1\tn00020827\t-1\tmatter\n'
                  '2\tn00002684\t-1\tobject, physical object\n'
                  '3\tn05220461\t0\tbody  part\n')
IMAGENET_DICT = '0\ttench\tTinca\ttinca\n1\tgoldfish\tCarassius\tauratus\n' \
                '2\tgreat\twhite\tshark\twhite\tshark\tman-eater\n'


class Stream(object):
    def __init__(self):
        self.text = ''

    def write(self, text):
        self.text += text


def test_ml_images_dictionary_with_header_and_index_column(tmp_path):
    path = write_text(tmp_path / 'dict.txt', ML_IMAGES_DICT)
    assert inference_io.load_class_names(path) == ['thing', 'matter', 'object, physical object',
                                              'body part']


def test_ml_images_dictionary_without_header_or_index_column(tmp_path):
    # The published dictionary_and_semantic_hierarchy.txt: WordNet id, parent, name.
    path = write_text(tmp_path / 'dict.txt', 'n00002452\t-1\tthing\nn00020827\t-1\tmatter\n'
                                        'n05220461\t0\tbody part\n\n')
    assert inference_io.load_class_names(path, 3) == ['thing', 'matter', 'body part']
    unordered = write_text(tmp_path / 'unordered.txt',
                      '1 n00020827 -1 matter\n0 n00002452 -1 thing\n')
    assert inference_io.load_class_names(unordered) == ['thing', 'matter']
    # the demo's dictionary: a header, ids that are no WordNet ids
    demo = write_text(tmp_path / 'demo.txt', 'category_index\tcategory_id\tx\ty\n'
                                        '0\tdemo00000\t-1\tred circle\n')
    assert inference_io.load_class_names(demo) == ['red circle']
    # without the header, such lines are just names
    names = write_text(tmp_path / 'names.txt', 'red 3 dogs\nblue 4 cats\n')
    assert inference_io.load_class_names(names) == ['red 3 dogs', 'blue 4 cats']


def test_one_name_per_line_dictionary(tmp_path):
    path = write_text(tmp_path / 'names.txt', 'tench, Tinca tinca\ngoldfish\n  great white shark \n')
    assert inference_io.load_class_names(path) == ['tench, Tinca tinca', 'goldfish',
                                              'great white shark']


@pytest.mark.parametrize('text, fragment', [
    (ML_IMAGES_DICT + 'garbage line\n', 'line 6'),
    (ML_IMAGES_DICT + '3\tn00000001\t-1\tagain\n', 'class 3 listed twice'),
    ('category_index x\n0 n00002452 -1 a\n2 n00002453 -1 b\n', 'not 0 .. 1'),
    ('a\n\nb\n', 'line 2: empty class name'),
])
def test_bad_dictionaries_name_the_line(tmp_path, text, fragment):
    path = write_text(tmp_path / 'dict.txt', text)
    with pytest.raises(ValueError) as error:
        inference_io.load_class_names(path)
    assert path in str(error.value) and fragment in str(error.value)


def test_dictionary_class_count_must_match_the_model(tmp_path):
    path = write_text(tmp_path / 'dict.txt', ML_IMAGES_DICT)
    with pytest.raises(errors.UsageError, match='has 4 classes, the model has 5'):
        inference_io.load_class_names(path, 5)
    with pytest.raises(errors.UsageError, match='does not exist'):
        inference_io.load_class_names(str(tmp_path / 'none.txt'))


def test_list_files_take_the_path_before_the_labels(tmp_path):
    path = write_text(tmp_path / 'list.txt', 'dir/a b.jpg\t0:1 3:0.9\n# comment\n\n'
                                        'c.png 2 4\n/abs/d.jpg\n')
    assert inference_io.list_file_entries(path) == [
        ('dir/a b.jpg', 'dir/a b.jpg'), ('c.png', 'c.png'), ('/abs/d.jpg', '/abs/d.jpg')]
    assert inference_io.list_file_entries(path, '/root')[:2] == [
        ('dir/a b.jpg', '/root/dir/a b.jpg'), ('c.png', '/root/c.png')]


def test_directories_give_their_images_recursively_in_natural_order(tmp_path):
    for name in ('img10.jpg', 'img2.JPEG', 'sub/img1.png', 'notes.txt', '.hidden.jpg'):
        os.makedirs(os.path.dirname(str(tmp_path / name)), exist_ok=True)
        write_text(tmp_path / name, 'x')
    root = str(tmp_path)
    names = [name for name, _ in inference_io.collect_images([root, 'other.jpg'])]
    assert names == [os.path.join(root, 'img2.JPEG'), os.path.join(root, 'img10.jpg'),
                     os.path.join(root, 'sub', 'img1.png'), 'other.jpg']
    with pytest.raises(errors.UsageError, match='no images found in'):
        inference_io.collect_images([empty_dir(tmp_path)])
    with pytest.raises(errors.UsageError, match='no images given'):
        inference_io.collect_images()


def test_ranked_classes_top_k_then_everything_over_the_threshold():
    scores = np.array([0.2, 0.9, 0.6, 0.9, 0.7], np.float32)
    # equal scores: lower class first, as tf.nn.top_k
    assert [c for _, c, _, _ in inference_io.ranked_classes(scores, 2)] == [1, 3]
    ranked = inference_io.ranked_classes(scores, 2, threshold=0.6)
    assert [(r, c, p) for r, c, _, p in ranked] == [(1, 1, True), (2, 3, True), (3, 4, True),
                                                    (4, 2, True)]
    ranked = inference_io.ranked_classes(scores, 3, threshold=0.95)
    assert [(c, p) for _, c, _, p in ranked] == [(1, False), (3, False), (4, False)]
    assert len(inference_io.ranked_classes(scores, 99)) == 5


def test_tsv_and_json_lines_formats():
    outputs = {'scores': np.array([0.1, 0.8, 0.6], np.float32),
               'probabilities': np.array([0.2, 0.5, 0.3], np.float32)}
    stream = Stream()
    writer = inference_io.PredictionWriter(stream, 'tsv', 1, 0.5, ['a', 'b c', 'd'])
    writer.write('x.jpg', outputs)
    assert stream.text.splitlines() == ['image\trank\tclass\tscore\tpositive\tname',
                                        'x.jpg\t1\t1\t0.800000\t1\tb c',
                                        'x.jpg\t2\t2\t0.600000\t1\td']
    stream = Stream()
    writer = inference_io.PredictionWriter(stream, 'jsonl', 2, 0.7)
    writer.write('x.jpg', outputs)
    writer.write('y.jpg', outputs)
    first, second = [json.loads(line) for line in stream.text.splitlines()]
    assert first == {'image': 'x.jpg', 'top_k': [{'class': 1, 'score': 0.8},
                                                 {'class': 2, 'score': 0.6}],
                     'positives': [{'class': 1, 'score': 0.8}]}
    assert second['image'] == 'y.jpg'
    stream = Stream()
    writer = inference_io.PredictionWriter(stream, 'tsv', 2, None)  # single-label: softmax
    writer.write('x.jpg', outputs)
    assert stream.text.splitlines() == ['image\trank\tclass\tscore', 'x.jpg\t1\t1\t0.500000',
                                        'x.jpg\t2\t2\t0.300000']


def test_imagenet_dictionary_layout(tmp_path):
    path = write_text(tmp_path / 'imagenet2012_dictionary.txt', IMAGENET_DICT)
    assert inference_io.load_class_names(path, 3) == [
        'tench Tinca tinca', 'goldfish Carassius auratus',
        'great white shark white shark man-eater']
    # the original's reading: the second tab field of the line keyed by the index
    assert inference_io.load_original_class_names(path, 3) == ['tench', 'goldfish', 'great']


def test_original_reading_of_the_ml_images_dictionary_gives_wordnet_ids(tmp_path):
    path = write_text(tmp_path / 'dict.txt', ML_IMAGES_DICT)
    assert inference_io.load_original_class_names(path, 4) == [
        'n00002452', 'n00020827', 'n00002684', 'n05220461']
    with pytest.raises(errors.UsageError, match='has no line for class 4 \\(of 5\\)'):
        inference_io.load_original_class_names(path, 5)
    bad = write_text(tmp_path / 'bad.txt', '0 tench\n')
    with pytest.raises(Exception, match='line 1: expected "index<TAB>name"'):
        inference_io.load_original_class_names(bad, 1)


def test_original_list_splitting_and_output_lines(tmp_path):
    listing = write_text(tmp_path / 'list.txt', 'a b.jpg 7\n\nc.jpg\td 1\ne.jpg\n')
    entries = inference_io.original_list_entries(listing, ' ')
    assert [(str(n), n.second, p) for n, p in entries] == [
        ('a', 'b.jpg', 'a'), ('c.jpg\td', '1', 'c.jpg\td'), ('e.jpg', '', 'e.jpg')]
    entries = inference_io.original_list_entries(listing, '\t')
    assert [str(n) for n, _ in entries] == ['a b.jpg 7', 'c.jpg', 'e.jpg']
    line = inference_io.original_feature_line(
        inference_io.ListEntry('x.jpg', '3'), np.array([0.1, 1e-8, -2.5, 3], np.float32))
    assert line == 'x.jpg\t3\t0.1 1e-08 -2.5 3.0\n'
    stream = Stream()
    writer = inference_io.OriginalClassificationWriter(stream, 2, ['a', 'b', 'c'])
    writer.write('p.jpg', {'probabilities': np.array([0.2, 0.1234, 0.6766], np.float32)})
    writer.skip('q.jpg')
    assert stream.text == ('+++ the predictions of p.jpg is:\n2 c: 0.677\n0 a: 0.200\n'
                           'open pic q.jpg failed\n')
