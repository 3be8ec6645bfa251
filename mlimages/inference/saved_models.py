"""What a SavedModel of this program is on disk: TensorFlow Serving's layout of versions,
<base>/<integer version>/, and the text files beside the graph in assets.extra/ (which
TensorFlow Serving and the loaders ignore):

    preprocessing.txt  `preprocess=NAME: description (S = size)`: how encoded images become
                       the network input in serving_default
    signatures.txt     each signature's inputs and outputs: shapes, types, layout and range
    flags.txt          the settings the model was trained with (the run's flags.txt)
    thresholds.txt     with --threshold=calibrated: the per-class thresholds of the
                       `positives` output (calibration.py's file, copied)

serving.py loads such a model, export.py writes one.
"""
import os

from mlimages.errors import UsageError

ASSETS = 'assets.extra'
PREPROCESSING_FILE = os.path.join(ASSETS, 'preprocessing.txt')
SIGNATURES_FILE = os.path.join(ASSETS, 'signatures.txt')
FLAGS_FILE = os.path.join(ASSETS, 'flags.txt')
THRESHOLDS_FILE = os.path.join(ASSETS, 'thresholds.txt')


def is_saved_model(directory):
    return any(os.path.isfile(os.path.join(directory, name))
               for name in ('saved_model.pb', 'saved_model.pbtxt'))


def versions(base):
    """{version: path} of the SavedModels in base/<integer version>/ (TensorFlow Serving's
    layout)."""
    if not os.path.isdir(base):
        return {}
    return {int(name): os.path.join(base, name) for name in os.listdir(base)
            if name.isdigit() and is_saved_model(os.path.join(base, name))}


def check_export_dir(export_dir):
    """export_dir may be new, empty or hold earlier versions (base/<integer>/), which an
    export keeps."""
    if not os.path.exists(export_dir):
        return
    if not os.path.isdir(export_dir):
        raise UsageError('export directory %s exists and is not a directory' % export_dir)
    if is_saved_model(export_dir):
        raise UsageError('export directory %s is itself a SavedModel (an unversioned export); '
                         'exports go to <dir>/<version>/ -- give a new directory, or move it '
                         'to %s' % (export_dir, os.path.join(export_dir, '1')))
    kept = versions(export_dir)
    others = sorted(name for name in os.listdir(export_dir) if not name.startswith('.')
                    and not (name.isdigit() and int(name) in kept))
    if others:
        raise UsageError('export directory %s holds something other than SavedModel versions '
                         '(%s); give a new directory' % (export_dir, ', '.join(others)))


def resolve_saved_model(path):
    """A SavedModel directory, or a base of versions (its highest); raises UsageError."""
    if os.path.isdir(path) and is_saved_model(path):
        return path
    found = versions(path)
    if not found:
        raise UsageError('%s is not a SavedModel directory (no saved_model.pb) nor a base '
                         'directory of versions (<dir>/<integer>/saved_model.pb)' % path)
    return found[max(found)]


def asset(export_dir, name):
    """The path of assets.extra file `name` (PREPROCESSING_FILE, ...) of a SavedModel, or
    None when it has none (exported before it was written)."""
    path = os.path.join(export_dir, name)
    return path if os.path.isfile(path) else None


def saved_model_preprocessing(export_dir):
    """The preprocessing line recorded in a SavedModel, or None (exported before it was)."""
    path = asset(export_dir, PREPROCESSING_FILE)
    if path is None:
        return None
    with open(path) as f:
        return f.read().strip()
