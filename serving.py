"""Inference: one place for everything that runs a trained model on image files.

Why this module exists: four entry points need the same inference code -- train.py's
--mode predict and --mode export (and --export_dir after training), tools/predict.py and
tools/extract_features.py. If each built its own graph, the exported SavedModel, the
predictions from a checkpoint and the extracted features could drift apart (another
preprocessing, another head). Here there is one inference graph, built from the training
code itself:

    encoded image bytes [N] -> image_preprocess.decode_image
                            -> image_preprocess.preprocess_image(..., is_training=False)
                            -> train.resnet_model_fn(..., PREDICT, params)
                            -> scores (sigmoid), probabilities (softmax),
                               top_k_classes / top_k_scores (by sigmoid score), features

`export_saved_model` writes it as a SavedModel (signature 'serving_default', input
'images': a batch of JPEG/PNG/GIF/BMP file contents); `Predictor` runs it in a tf.Session,
restored from a checkpoint or loaded from such a SavedModel, so both sources give the same
numbers. The rest: finding the images (paths, list files, directories), the class
dictionary, batched prediction that reports and skips images which cannot be read or
decoded, the TSV / JSON-lines formatting, and outputs written under a temporary name and
renamed when complete.

Errors in the input (no checkpoint, a model that does not fit, a bad dictionary) are
train.UsageError / file_db.DataError: one line, reported by the caller with exit status 2.
"""
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import tensorflow.compat.v1 as tf

import file_db
import flags as flags_lib
import image_preprocess
import resnet
import train

UsageError = train.UsageError

INPUT_KEY = 'images'
SIGNATURE_KEY = tf.saved_model.signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY
SERVING_TAGS = [tf.saved_model.tag_constants.SERVING]
OUTPUT_KEYS = ('scores', 'probabilities', 'top_k_classes', 'top_k_scores', 'features')
DEFAULT_TOP_K = 5
DEFAULT_THRESHOLD = 0.5
# What a directory given as an image source contributes (TensorFlow's decode_image formats).
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.gif', '.bmp')


# ---------------------------------------------------------------------------- the graph

def preprocess_encoded(encoded, image_size):
    """Encoded images [N] (tf.string) -> network input [N, S, S, 3], evaluation preprocessing."""
    def one(data):
        image = image_preprocess.decode_image(data)
        return image_preprocess.preprocess_image(image, image_size, is_training=False)
    return tf.map_fn(one, encoded, back_prop=False,
                     fn_output_signature=tf.TensorSpec([image_size, image_size, 3],
                                                       tf.float32))


class _FlagDefaults(object):
    """The attributes train.model_params reads: flags.py's defaults, some overridden."""

    def __init__(self, **values):
        self.__dict__['_values'] = values

    def __getattr__(self, name):
        if name in self._values:
            return self._values[name]
        return flags_lib.FLAGS[name].default


def inference_params(resnet_size, class_num, data_format='channels_last', **overrides):
    """The params of train.resnet_model_fn for a model with the training defaults (batch-norm
    epsilon and the rest as in flags.py) -- what the tools use; train.py passes its flags."""
    f = _FlagDefaults(resnet_size=resnet_size, class_num=class_num, model_dir='', **overrides)
    return train.model_params(f, data_format)


def serving_outputs(predictions, top_k):
    """resnet_model_fn's predictions -> the serving outputs (OUTPUT_KEYS)."""
    class_num = tf.compat.dimension_value(predictions['scores'].shape[-1])
    top_scores, top_classes = tf.nn.top_k(predictions['scores'], k=min(top_k, class_num))
    return {'scores': predictions['scores'], 'probabilities': predictions['probabilities'],
            'top_k_classes': tf.cast(top_classes, tf.int64), 'top_k_scores': top_scores,
            'features': predictions['features']}


def build_inference_graph(params, image_size, top_k=DEFAULT_TOP_K):
    """In the default graph: the string placeholder of encoded images and the outputs."""
    encoded = tf.placeholder(tf.string, [None], name='encoded_images')
    images = preprocess_encoded(encoded, image_size)
    spec = train.resnet_model_fn(images, None, tf.estimator.ModeKeys.PREDICT, params)
    return encoded, serving_outputs(spec.predictions, top_k)


# ---------------------------------------------------------------------------- checkpoints

def checkpoint_model(path, resnet_size=None, class_num=None):
    """(resnet_size, class_num) of the model in a checkpoint, read from its variables.

    resnet_size / class_num, when given, must match; a checkpoint without this program's
    model variables is an error too (train.check_checkpoint_head).
    """
    try:
        shapes = dict(tf.train.list_variables(path))
    except (tf.errors.OpError, ValueError) as e:
        raise UsageError('%s is not a readable checkpoint: %s' % (path, train.op_error_text(e)))
    found_classes = shapes.get('logits/dense/bias', [None])[0]
    train.check_checkpoint_head(path, class_num or found_classes)
    blocks = {}
    for name in shapes:
        match = re.match(r'stages_(\d+)_block_(\d+)/', name)
        if match:
            stage, block = int(match.group(1)), int(match.group(2))
            blocks[stage] = max(blocks.get(stage, 0), block + 1)
    stages = [blocks.get(i, 0) for i in range(max(blocks) + 1)] if blocks else []
    block_type = 'bottleneck' if any('/conv3_b2/' in n for n in shapes) else 'basic'
    sizes = [size for size in resnet.SUPPORTED_SIZES
             if resnet.ResNet(size, 1).stages == stages
             and resnet.ResNet(size, 1).block_type == block_type]
    if not sizes:
        raise UsageError('%s holds no ResNet this program builds (%s blocks per stage %s)'
                         % (path, block_type, stages))
    if resnet_size and resnet_size != sizes[0]:
        raise UsageError('%s is a ResNet-%d, --resnet_size is %d' % (path, sizes[0], resnet_size))
    return sizes[0], found_classes


def restore(session, checkpoint_path):
    """Restores the model variables of the default graph from checkpoint_path."""
    try:
        tf.train.Saver(tf.global_variables()).restore(session, checkpoint_path)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
        raise UsageError('%s does not fit the model: %s'
                         % (checkpoint_path, train.op_error_text(e)))


# ---------------------------------------------------------------------------- export

def check_export_dir(export_dir):
    """export_dir may be new, empty or an earlier SavedModel (which an export replaces)."""
    if not os.path.exists(export_dir):
        return
    if not os.path.isdir(export_dir):
        raise UsageError('export directory %s exists and is not a directory' % export_dir)
    if os.listdir(export_dir) and not is_saved_model(export_dir):
        raise UsageError('export directory %s exists and holds something other than a '
                         'SavedModel; give a new directory' % export_dir)


def is_saved_model(directory):
    return any(os.path.isfile(os.path.join(directory, name))
               for name in ('saved_model.pb', 'saved_model.pbtxt'))


def export_saved_model(checkpoint_path, export_dir, params, image_size, top_k=DEFAULT_TOP_K):
    """Writes the inference graph with the checkpoint's weights as a SavedModel in export_dir.

    It is built in a temporary directory beside export_dir and renamed when complete; an
    earlier SavedModel in export_dir is replaced only then.
    """
    check_export_dir(export_dir)
    export_dir = os.path.abspath(export_dir)
    parent = os.path.dirname(export_dir)
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix='.%s.tmp-' % os.path.basename(export_dir), dir=parent)
    building = os.path.join(work, 'saved_model')
    try:
        with tf.Graph().as_default():
            encoded, outputs = build_inference_graph(params, image_size, top_k)
            with tf.Session() as session:
                restore(session, checkpoint_path)
                signature = tf.saved_model.signature_def_utils.predict_signature_def(
                    inputs={INPUT_KEY: encoded}, outputs=outputs)
                builder = tf.saved_model.builder.SavedModelBuilder(building)
                builder.add_meta_graph_and_variables(
                    session, SERVING_TAGS, signature_def_map={SIGNATURE_KEY: signature},
                    strip_default_attrs=True)
                builder.save()
        if os.path.isdir(export_dir):
            os.rename(export_dir, os.path.join(work, 'previous'))
        os.rename(building, export_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return export_dir


# ---------------------------------------------------------------------------- prediction

class Predictor(object):
    """The inference graph in a session; `run(encoded_images)` -> {output: array [N, ...]}.

    Build it with `from_checkpoint` or `from_saved_model`; both give OUTPUT_KEYS.
    """

    def __init__(self, session, encoded, outputs, source):
        self.session = session
        self.source = source
        self._encoded = encoded
        self._outputs = outputs
        self.class_num = tf.compat.dimension_value(outputs['scores'].shape[-1])
        self.feature_dim = tf.compat.dimension_value(outputs['features'].shape[-1])
        with session.graph.as_default():
            # Decoding alone, to tell which image of a failed batch is undecodable.
            self._one = tf.placeholder(tf.string, [])
            self._decoded_shape = tf.shape(image_preprocess.decode_image(self._one))

    @classmethod
    def from_checkpoint(cls, checkpoint_path, params, image_size, top_k=DEFAULT_TOP_K):
        graph = tf.Graph()
        with graph.as_default():
            encoded, outputs = build_inference_graph(params, image_size, top_k)
            session = tf.Session(graph=graph)
            try:
                restore(session, checkpoint_path)
            except UsageError:
                session.close()
                raise
        return cls(session, encoded, outputs, checkpoint_path)

    @classmethod
    def from_saved_model(cls, export_dir):
        if not tf.io.gfile.isdir(export_dir) or not is_saved_model(export_dir):
            raise UsageError('%s is not a SavedModel directory (no saved_model.pb)'
                             % export_dir)
        graph = tf.Graph()
        session = tf.Session(graph=graph)
        try:
            with graph.as_default():
                try:
                    meta = tf.saved_model.loader.load(session, SERVING_TAGS, export_dir)
                except (RuntimeError, IOError, tf.errors.OpError) as e:
                    raise UsageError('cannot load the SavedModel %s: %s'
                                     % (export_dir, train.op_error_text(e)))
                signature = meta.signature_def.get(SIGNATURE_KEY)
                if (signature is None or INPUT_KEY not in signature.inputs
                        or not set(OUTPUT_KEYS) <= set(signature.outputs)):
                    raise UsageError('%s is not a SavedModel of this program (no %r signature '
                                     'with input %r and outputs %s)' % (
                                         export_dir, SIGNATURE_KEY, INPUT_KEY,
                                         ', '.join(OUTPUT_KEYS)))
                encoded = graph.get_tensor_by_name(signature.inputs[INPUT_KEY].name)
                outputs = {key: graph.get_tensor_by_name(signature.outputs[key].name)
                           for key in OUTPUT_KEYS}
        except UsageError:
            session.close()
            raise
        return cls(session, encoded, outputs, export_dir)

    def run(self, encoded_images, keys=OUTPUT_KEYS):
        fetches = {key: self._outputs[key] for key in keys}
        return self.session.run(fetches, {self._encoded: list(encoded_images)})

    def decode_error(self, encoded_image):
        """Why encoded_image cannot be decoded, or None when it can."""
        try:
            self.session.run(self._decoded_shape, {self._one: encoded_image})
        except tf.errors.OpError as e:
            return train.op_error_text(e)
        return None

    def close(self):
        self.session.close()


def load_predictor(checkpoint=None, saved_model=None, image_size=None, resnet_size=None,
                   class_num=None, top_k=DEFAULT_TOP_K, data_format=None, params=None,
                   checkpoint_flag='checkpoint'):
    """A Predictor from a checkpoint (a model directory or a checkpoint path; errors name it
    as --<checkpoint_flag>) or a SavedModel.

    With a checkpoint the architecture and class count are read from its variables
    (resnet_size / class_num, when given, are checked against them); params replaces
    inference_params (train.py passes its flags). With a SavedModel everything is fixed
    at export; class_num is checked.
    """
    if saved_model:
        predictor = Predictor.from_saved_model(saved_model)
        if class_num and class_num != predictor.class_num:
            predictor.close()
            raise UsageError('%s has %d classes, --class_num is %d'
                             % (saved_model, predictor.class_num, class_num))
        return predictor
    if not checkpoint:
        raise UsageError('no checkpoint given')
    path = train.resolve_checkpoint(checkpoint, checkpoint_flag)
    resnet_size, class_num = checkpoint_model(path, resnet_size, class_num)
    if params is None:
        if data_format is None:
            data_format = train.resolve_data_format('auto', train.gpu_visible())
        params = inference_params(resnet_size, class_num, data_format)
    return Predictor.from_checkpoint(path, params, image_size, top_k)


# ---------------------------------------------------------------------------- images

def _natural_key(path):
    return [int(part) if part.isdigit() else part for part in re.split(r'(\d+)', path)]


def list_file_entries(list_file, image_root=None):
    """(name, path) per line of a list file: the path is the text before the first tab, or
    the first whitespace-separated field of a line without tabs, so the image lists of the
    record builder (with their labels) work as they are. Relative paths are taken relative
    to image_root (default: the current directory); the name is the path as written."""
    if not os.path.isfile(list_file):
        raise UsageError('image list %s does not exist' % list_file)
    entries = []
    with open(list_file, encoding='utf-8', errors='surrogateescape') as f:
        for line in f:
            line = line.rstrip('\r\n')
            if not line.strip() or line.lstrip().startswith('#'):
                continue
            name = line.split('\t', 1)[0].strip() if '\t' in line else line.split()[0]
            entries.append((name, os.path.join(image_root, name) if image_root else name))
    return entries


def directory_entries(directory):
    """(path, path) of every image file (IMAGE_EXTENSIONS) under directory, natural order."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith('.')]
        found += [os.path.join(root, name) for name in files
                  if name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith('.')]
    return [(path, path) for path in sorted(found, key=_natural_key)]


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


def predict_images(predictor, images, batch_size, on_skip, keys=OUTPUT_KEYS):
    """Yields (name, {key: row}) for every image of `images` ((name, path) pairs) that could
    be read and decoded, in order, running batch_size images at a time. For each other one
    calls on_skip(name, reason) and goes on."""
    batch = []
    for name, path in images:
        try:
            data = read_image_file(path)
        except (OSError, tf.errors.OpError) as e:
            on_skip(name, 'cannot read: %s' % train.op_error_text(e))
            continue
        batch.append((name, data))
        if len(batch) >= batch_size:
            for item in _run_batch(predictor, batch, on_skip, keys):
                yield item
            batch = []
    for item in _run_batch(predictor, batch, on_skip, keys):
        yield item


def _run_batch(predictor, batch, on_skip, keys):
    """Runs one batch; when it fails, drops the undecodable images and runs the rest (one by
    one if that still fails), reporting each image that fails."""
    if not batch:
        return []
    rows = _try_rows(predictor, batch, keys)
    if rows is not None:
        return rows
    good = []
    for name, data in batch:
        error = predictor.decode_error(data)
        if error:
            on_skip(name, 'cannot decode: %s' % error)
        else:
            good.append((name, data))
    if not good:
        return []
    rows = _try_rows(predictor, good, keys)
    if rows is not None:
        return rows
    rows = []
    for name, data in good:
        try:
            rows += _rows([(name, data)], predictor.run([data], keys), keys)
        except tf.errors.OpError as e:
            on_skip(name, train.op_error_text(e))
    return rows


def _try_rows(predictor, batch, keys):
    """The rows of (name, data) `batch` run as one batch; None when the run fails."""
    try:
        return _rows(batch, predictor.run([data for _, data in batch], keys), keys)
    except tf.errors.OpError:
        return None


def _rows(batch, outputs, keys):
    return [(name, {key: outputs[key][i] for key in keys}) for i, (name, _) in enumerate(batch)]


# ---------------------------------------------------------------------------- class names

ML_IMAGES_HEADER = 'category_index'
# index (optional), category id, parent index, name. Without the header line the id must be
# a WordNet id, lest a file of names such as "red 3 dogs" be taken for a dictionary.
_DICTIONARY_LINE = re.compile(r'^(?:(\d+)\s+)?(\S+)\s+(-?\d+)\s+(\S.*)$')
_HEADERLESS_LINE = re.compile(r'^(?:(\d+)\s+)?(n\d{8})\s+(-?\d+)\s+(\S.*)$')


def load_class_names(path, class_num=None):
    """Class index -> name, from a class dictionary in either format:

    * ML-Images (SPEC section 1): an optional header line starting with 'category_index',
      then per class `index  category-id  parent-index  name` (the name may contain
      spaces; the published file also comes without header and index column:
      `WordNet-id  parent-index  name`; without the header the id must be a WordNet id);
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
    if header or (body and all(matches)):
        names = _dictionary_names(path, body, matches, 2 if header else 1)
    else:
        names = [line.strip() for line in body]
        for number, name in enumerate(names, 1):
            if not name:
                raise file_db.DataError('%s, line %d: empty class name' % (path, number))
    names = [' '.join(name.split()) for name in names]  # no tabs in a TSV field
    if class_num is not None and len(names) != class_num:
        raise UsageError('class dictionary %s has %d classes, the model has %d'
                         % (path, len(names), class_num))
    return names


def _dictionary_names(path, body, matches, first_line_number):
    names = {}
    for number, (line, match) in enumerate(zip(body, matches), first_line_number):
        if not match:
            raise file_db.DataError('%s, line %d: expected "index WordNet-id parent-index '
                                    'name", got %r' % (path, number, line[:80]))
        index = int(match.group(1)) if match.group(1) is not None else len(names)
        if index in names:
            raise file_db.DataError('%s, line %d: class %d listed twice' % (path, number, index))
        names[index] = match.group(4)
    if sorted(names) != list(range(len(names))):
        raise file_db.DataError('%s: class indices are not 0 .. %d' % (path, len(names) - 1))
    return [names[i] for i in range(len(names))]


# ---------------------------------------------------------------------------- output

def ranked_classes(scores, top_k, threshold=None):
    """[(rank, class, score, positive)] of the best classes of one image, best first: the
    top_k, and with a threshold also every class with score >= threshold (positive).
    Equal scores keep the lower class first, as tf.nn.top_k does."""
    order = np.argsort(-scores, kind='stable')
    count = min(top_k, len(scores))
    if threshold is not None:
        count = max(count, int(np.sum(scores >= threshold)))
    return [(rank + 1, int(c), float(scores[c]),
             None if threshold is None else bool(scores[c] >= threshold))
            for rank, c in enumerate(order[:count])]


class PredictionWriter(object):
    """Formats predictions as TSV (one row per image and listed class, with a header) or
    JSON lines (one object per image).

    Multi-label (threshold given): score = sigmoid; TSV lists the top_k classes and every
    class with score >= threshold, with a 'positive' column (1/0); JSON has 'top_k' and
    'positives'. Single-label (threshold None): score = softmax probability, the top_k.
    The class name comes from the dictionary, when there is one.
    """

    def __init__(self, stream, fmt='tsv', top_k=DEFAULT_TOP_K, threshold=DEFAULT_THRESHOLD,
                 class_names=None):
        if fmt not in ('tsv', 'jsonl'):
            raise UsageError('unknown output format %r (tsv or jsonl)' % fmt)
        self.stream = stream
        self.fmt = fmt
        self.top_k = top_k
        self.threshold = threshold
        self.class_names = class_names
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
        return '\t'.join(columns) + '\n'

    def write(self, name, outputs):
        ranked = ranked_classes(outputs[self.score_key], self.top_k, self.threshold)
        if self.fmt == 'tsv':
            if not self.count:
                self.stream.write(self.header())
            for rank, c, score, positive in ranked:
                fields = [name, str(rank), str(c), '%.6f' % score]
                if positive is not None:
                    fields.append('1' if positive else '0')
                if self.class_names is not None:
                    fields.append(self.class_names[c])
                self.stream.write('\t'.join(fields) + '\n')
        else:
            record = {'image': name, 'top_k': [self._entry(c, s) for rank, c, s, _ in ranked
                                               if rank <= self.top_k]}
            if self.threshold is not None:
                record['positives'] = [self._entry(c, s) for _, c, s, positive in ranked
                                       if positive]
            self.stream.write(json.dumps(record, ensure_ascii=False) + '\n')
        self.count += 1

    def _entry(self, c, score):
        entry = {'class': c, 'score': round(score, 6)}
        if self.class_names is not None:
            entry['name'] = self.class_names[c]
        return entry


@contextlib.contextmanager
def atomic_output(path, binary=False):
    """A file object whose content appears at `path` only when the block completes: it is
    written under a temporary name beside `path` and renamed at the end (removed on error
    or when the block calls `discard()` on the yielded object). None or '-' = stdout."""
    if path in (None, '-'):
        stream = sys.stdout.buffer if binary else sys.stdout
        yield _Unowned(stream)
        stream.flush()
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError('output directory %s does not exist' % directory)
    fd, temp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), suffix='.tmp',
                                dir=directory)
    stream = os.fdopen(fd, 'wb' if binary else 'w', **({} if binary else
                                                        {'encoding': 'utf-8'}))
    handle = _Owned(stream)
    try:
        yield handle
        stream.close()
        if handle.discarded:
            os.unlink(temp)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)
            os.replace(temp, path)
    except BaseException:
        stream.close()
        if os.path.exists(temp):
            os.unlink(temp)
        raise


class _Owned(object):
    def __init__(self, stream):
        self.stream = stream
        self.discarded = False

    def write(self, data):
        return self.stream.write(data)

    def discard(self):
        self.discarded = True


class _Unowned(_Owned):
    def discard(self):
        pass


# ---------------------------------------------------------------------------- programs

def skip_reporter(program, counter):
    """on_skip for predict_images: one line on stderr per image that is skipped."""
    def report(name, reason):
        counter.append(name)
        sys.stderr.write('%s: skipped %s: %s\n' % (program, name, ' '.join(reason.split())))
        sys.stderr.flush()
    return report


def run_predict(predictor, images, output=None, fmt='tsv', batch_size=32,
                top_k=DEFAULT_TOP_K, threshold=DEFAULT_THRESHOLD, class_names=None,
                program='predict.py'):
    """Predicts every image and writes the result (stdout when output is None or '-').
    Returns (images processed, images skipped); a file output is left out when none was
    processed."""
    skipped = []
    on_skip = skip_reporter(program, skipped)
    try:
        with atomic_output(output) as out:
            writer = PredictionWriter(out, fmt, top_k, threshold, class_names)
            for name, outputs in predict_images(predictor, images, batch_size, on_skip,
                                                keys=(writer.score_key,)):
                writer.write(name, outputs)
            if not writer.count:
                out.discard()
    except BrokenPipeError:
        if output not in (None, '-'):
            raise
        # The reader of stdout has gone (`| head`): stop quietly, as command-line tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return writer.count, len(skipped)


def run_extract_features(predictor, images, output, names_output=None, batch_size=32,
                         program='extract_features.py'):
    """The pooled feature of every image that can be processed: `output` (.npy, float32,
    N x feature_dim) and `names_output` (one image name per line, in row order; default:
    output with .txt for .npy). Rows are streamed through a temporary file, so memory does
    not grow with N; both files appear only when complete. Returns (processed, skipped)."""
    names_output = names_output or (output[:-4] if output.endswith('.npy') else output) + '.txt'
    skipped = []
    on_skip = skip_reporter(program, skipped)
    names = []
    with tempfile.TemporaryFile() as rows, atomic_output(names_output) as names_file, \
            atomic_output(output, binary=True) as npy:
        for name, outputs in predict_images(predictor, images, batch_size, on_skip,
                                            keys=('features',)):
            rows.write(np.asarray(outputs['features'], '<f4').tobytes())
            names_file.write(name + '\n')
            names.append(name)
        if not names:
            names_file.discard()
            npy.discard()
            return 0, len(skipped)
        shape = (len(names), predictor.feature_dim)
        np.lib.format.write_array_header_1_0(npy.stream, {
            'descr': '<f4', 'fortran_order': False, 'shape': shape})
        rows.seek(0)
        shutil.copyfileobj(rows, npy.stream)
    return len(names), len(skipped)
