"""PCA of features (tools/extract_features.py --pca_dim / --pca): fitted on one set of
images, saved, and applied unchanged to others, so their reduced features are comparable.

    fit      from the N x D features x_i of the set, summed as they stream by (float64,
             shifted by the first row against cancellation; memory D x D, not N x D):
               m = sum x_i / N,   C = sum (x_i - m)(x_i - m)^T / (N - 1)
             W [k, D] = the k eigenvectors of C with the largest eigenvalues, in that
             order, each signed so that its entry of largest magnitude is positive;
             variance [k] = those eigenvalues (what each component keeps)
    apply    y = (x - m) W^T, float32 [N, k]
    file     .npz (numpy.savez): mean [D], components [k, D], variance [k], total_variance
             (trace C), count N
"""
import collections
import os

import numpy as np

from mlimages import files
from mlimages.errors import UsageError

Pca = collections.namedtuple('Pca', ['mean', 'components', 'variance', 'total_variance',
                                     'count'])


class Moments(object):
    """The sums fit needs, added a batch of rows [B, D] at a time."""

    def __init__(self):
        self.count, self.shift, self.sum, self.outer = 0, None, None, None

    def add(self, rows):
        rows = np.asarray(rows, np.float64)
        if self.shift is None:
            self.shift = rows[0].copy()
            self.sum = np.zeros_like(self.shift)
            self.outer = np.zeros((len(self.shift), len(self.shift)))
        centred = rows - self.shift
        self.count += len(rows)
        self.sum += centred.sum(axis=0)
        self.outer += centred.T @ centred


def fit(moments, dim):
    """The PCA of `dim` components of the rows summed in moments (module docstring);
    UsageError when the set cannot give that many (at most min(D, N - 1))."""
    n = moments.count
    features = 0 if moments.shift is None else len(moments.shift)
    if dim > features or dim > n - 1:
        raise UsageError('--pca_dim=%d: a PCA of %d images of %d-d features has at most %d '
                         'components (min(D, N - 1)); fit it on more images or keep fewer'
                         % (dim, n, features, max(min(features, n - 1), 0)))
    mean_shifted = moments.sum / n
    covariance = (moments.outer - n * np.outer(mean_shifted, mean_shifted)) / (n - 1)
    values, vectors = np.linalg.eigh((covariance + covariance.T) / 2)
    order = np.argsort(-values, kind='stable')[:dim]
    components = vectors[:, order].T
    signs = np.sign(components[np.arange(dim), np.argmax(np.abs(components), axis=1)])
    components *= signs[:, None]
    return Pca(mean=moments.shift + mean_shifted, components=components,
               variance=values[order], total_variance=float(np.trace(covariance)), count=n)


def apply(pca, rows):
    """y = (x - m) W^T of rows [B, D], float32."""
    return ((np.asarray(rows, np.float64) - pca.mean) @ pca.components.T).astype(np.float32)


def save(path, pca):
    """Writes pca to path (.npz) under a temporary name, renamed when complete."""
    with files.atomic_output(path, binary=True) as out:
        np.savez(out.stream, **pca._asdict())


def load(path, feature_dim=None):
    """The Pca saved at path; UsageError (naming the file) when it is not one, or was
    fitted on features of another size than feature_dim."""
    if not os.path.isfile(path):
        raise UsageError('--pca %s does not exist (write one with --pca_dim K)' % path)
    try:
        with np.load(path) as saved:
            pca = Pca(**{name: saved[name] for name in Pca._fields})
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError('--pca %s is not a PCA saved by extract_features.py --pca_dim (%s)'
                         % (path, str(e).splitlines()[0] if str(e) else type(e).__name__))
    if feature_dim is not None and pca.mean.shape != (feature_dim,):
        raise UsageError('--pca %s was fitted on %d-d features, this model gives %d-d ones'
                         % (path, pca.mean.shape[0], feature_dim))
    return pca


def explained(pca):
    """The share of the set's variance the components keep, sum(variance) / trace C."""
    return float(np.sum(pca.variance) / pca.total_variance) if pca.total_variance else 1.0
