"""The result files of the inference commands (tools/predict.py, tools/extract_features.py,
train.py --mode=predict): every image through a serving.Predictor (serving.predict_images:
bad images reported on stderr and skipped), the results written by inference_io's writers
to files that appear only when complete; features optionally reduced by a PCA (pca.py)."""
import os
import shutil
import sys
import tempfile

import numpy as np

from mlimages import files
from mlimages.inference import inference_io
from mlimages.inference import pca as pca_lib
from mlimages.inference.inference_io import DEFAULT_THRESHOLD, DEFAULT_TOP_K
from mlimages.inference.serving import predict_images


def predict_to(predictor, images, output=None, fmt='tsv', batch_size=32,
                top_k=DEFAULT_TOP_K, threshold=DEFAULT_THRESHOLD, class_names=None,
                program='predict.py', hierarchy=None, consistent=False, progress=None):
    """Predicts every image and writes the result (stdout when output is None or '-').
    fmt: 'tsv', 'jsonl' (inference_io.PredictionWriter) or 'original'
    (inference_io.OriginalClassificationWriter: image_classification.py's text, softmax,
    one image at a time as the original so that `open pic PATH failed` lines keep their
    place; threshold is not used). threshold: one for every class, or one per class
    (calibration's), None for single-label. hierarchy, consistent: PredictionWriter's.
    progress: predict_images'. Returns (images processed, images skipped); a file output is
    left out when none was processed."""
    skipped = []
    on_skip = inference_io.skip_reporter(program, skipped)
    try:
        with files.atomic_output(output) as out:
            if fmt == 'original':
                writer = inference_io.OriginalClassificationWriter(out, top_k, class_names)
                report = on_skip

                def on_skip(name, reason):
                    report(name, reason)
                    writer.skip(name)
                batch_size = 1
            else:
                writer = inference_io.PredictionWriter(out, fmt, top_k, threshold,
                                                       class_names, hierarchy, consistent)
            for name, outputs in predict_images(predictor, images, batch_size, on_skip,
                                                (writer.score_key,), progress):
                writer.write(name, outputs)
            if not writer.count:
                out.discard()
    except BrokenPipeError:
        if output not in (None, '-'):
            raise
        # The reader of stdout has gone (`| head`): stop quietly, as command-line tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return writer.count, len(skipped)


def extract_features_text_to(predictor, images, output, batch_size=32,
                              program='extract_features.py', progress=None):
    """extract_feature.py's output: one line per image that can be processed,
    `path \t second field of its list line \t f1 ... fD` (inference_io.original_feature_line;
    the second field from inference_io.original_list_entries' names, else empty), written
    to `output` under a temporary name and renamed when complete. Returns (processed,
    skipped)."""
    skipped = []
    on_skip = inference_io.skip_reporter(program, skipped)
    count = 0
    with files.atomic_output(output) as out:
        for name, outputs in predict_images(predictor, images, batch_size, on_skip,
                                            ('features',), progress):
            out.write(inference_io.original_feature_line(name, outputs['features']))
            count += 1
        if not count:
            out.discard()
    return count, len(skipped)


def extract_features_to(predictor, images, output, names_output=None, batch_size=32,
                         program='extract_features.py', pca=None, fit_pca=None,
                         progress=None):
    """The pooled feature of every image that can be processed: `output` (.npy, float32,
    N x feature_dim) and `names_output` (one image name per line, in row order; default:
    output with .txt for .npy). Rows are streamed through a temporary file, so memory does
    not grow with N; both files appear only when complete. pca: a pca.Pca applied to every
    row (N x k); fit_pca: (k, path) fits a PCA of k components on these features, saves it
    at path and applies it. progress: predict_images'. Returns (processed, skipped, the PCA
    fitted or applied)."""
    names_output = names_output or (output[:-4] if output.endswith('.npy') else output) + '.txt'
    skipped = []
    on_skip = inference_io.skip_reporter(program, skipped)
    count = 0
    moments = pca_lib.Moments() if fit_pca else None
    pending = []  # rows not yet in moments: added a few hundred at a time
    with tempfile.TemporaryFile() as rows, \
            files.atomic_output(names_output) as names_file, \
            files.atomic_output(output, binary=True) as npy:
        for name, outputs in predict_images(predictor, images, batch_size, on_skip,
                                            ('features',), progress):
            row = np.asarray(outputs['features'], '<f4')
            if moments:
                pending.append(row)
                if len(pending) == 256:
                    moments.add(np.stack(pending))
                    pending = []
            elif pca is not None:
                row = pca_lib.apply(pca, row[None])[0]
            rows.write(row.astype('<f4').tobytes())
            names_file.write(name + '\n')
            count += 1
        if not count:
            names_file.discard()
            npy.discard()
            return 0, len(skipped), None
        width = predictor.feature_dim if pca is None else len(pca.components)
        if moments:
            if pending:
                moments.add(np.stack(pending))
            pca = pca_lib.fit(moments, fit_pca[0])
            width = fit_pca[0]
        np.lib.format.write_array_header_1_0(npy.stream, {
            'descr': '<f4', 'fortran_order': False, 'shape': (count, width)})
        rows.seek(0)
        if moments:
            chunk = 4096
            for start in range(0, count, chunk):
                block = np.frombuffer(rows.read(chunk * predictor.feature_dim * 4), '<f4')
                block = block.reshape(-1, predictor.feature_dim)
                npy.stream.write(pca_lib.apply(pca, block).astype('<f4').tobytes())
            pca_lib.save(fit_pca[1], pca)
        else:
            shutil.copyfileobj(rows, npy.stream)
    return count, len(skipped), pca
