"""pca.py against numpy's SVD (references.pca): the components up to their sign, the
variances, the projections; the streamed sums against one batch; the saved file read back;
what cannot be fitted or applied. extract_features.py --pca_dim / --pca on a trained model
is test_serving.py's."""
import numpy as np
import pytest

from mlimages.errors import UsageError
from mlimages.inference import pca
from references import pca as numpy_pca


def features(n=300, d=24, seed=0):
    """Rows like pooled ReLU features: non-negative, a large mean, correlated columns with
    distinct variances."""
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(d, d)) * np.linspace(3, 0.1, d)[:, None]
    return np.maximum(rng.normal(size=(n, d)) @ mixing + 20, 0).astype(np.float32)


def fitted(x, k, batch=37):
    moments = pca.Moments()
    for start in range(0, len(x), batch):
        moments.add(x[start:start + batch])
    return pca.fit(moments, k)


def test_fit_and_apply_match_numpys_svd():
    x = features()
    got = fitted(x, 6)
    mean, components, variance = numpy_pca(x, 6)
    np.testing.assert_allclose(got.mean, mean, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(got.variance, variance, rtol=1e-9)
    # an eigenvector's sign is free: pca.py makes the largest entry positive
    signs = np.sign(components[np.arange(6), np.argmax(np.abs(components), axis=1)])
    np.testing.assert_allclose(got.components, components * signs[:, None], atol=1e-9)
    assert np.all(got.components[np.arange(6), np.argmax(np.abs(got.components), axis=1)] > 0)
    reduced = pca.apply(got, x)
    assert reduced.dtype == np.float32 and reduced.shape == (len(x), 6)
    want = (x.astype(np.float64) - mean) @ (components * signs[:, None]).T
    np.testing.assert_allclose(reduced, want, rtol=0, atol=1e-4 * np.abs(want).max())
    assert got.count == len(x) and 0 < pca.explained(got) < 1
    total = np.sum(np.var(x.astype(np.float64), axis=0, ddof=1))
    assert pca.explained(got) == pytest.approx(np.sum(variance) / total, rel=1e-9)


def test_streamed_sums_are_one_batchs():
    x = features(seed=1)
    one, streamed = fitted(x, 4, batch=len(x)), fitted(x, 4, batch=1)
    for field in ('mean', 'components', 'variance'):
        np.testing.assert_allclose(getattr(streamed, field), getattr(one, field), atol=1e-9)


def test_saved_and_read_back(tmp_path):
    got = fitted(features(), 3)
    path = str(tmp_path / 'x.pca.npz')
    pca.save(path, got)
    back = pca.load(path, 24)
    for field in pca.Pca._fields:
        np.testing.assert_array_equal(getattr(back, field), getattr(got, field))
    with pytest.raises(UsageError, match='fitted on 24-d features, this model gives 512-d'):
        pca.load(path, 512)
    (tmp_path / 'other.npz').write_bytes(b'not a zip')
    with pytest.raises(UsageError, match='is not a PCA saved by extract_features.py'):
        pca.load(str(tmp_path / 'other.npz'))
    np.savez(str(tmp_path / 'arrays.npz'), mean=np.zeros(3))
    with pytest.raises(UsageError, match='is not a PCA saved by extract_features.py'):
        pca.load(str(tmp_path / 'arrays.npz'))


def test_more_components_than_the_set_holds_is_a_usage_error():
    with pytest.raises(UsageError, match=r'--pca_dim=5: a PCA of 5 images of 24-d features '
                                         r'has at most 4 components'):
        fitted(features(n=5), 5)
    with pytest.raises(UsageError, match='has at most 24 components'):
        fitted(features(n=100), 25)
