"""docs/kubernetes: the Kubeflow TFJob manifests run train.py with flags train.py accepts
and validates, the same in every replica, GPUs as --num_gpus says, a ps without GPUs."""
import os

import pytest
from absl import flags as absl_flags

import train

yaml = pytest.importorskip('yaml')
DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs',
                    'kubernetes')


def manifest(name):
    with open(os.path.join(DOCS, name)) as f:
        return yaml.safe_load(f)


def parsed_options(args):
    """train.py's own parser and validation on the manifest's arguments."""
    values = absl_flags.FlagValues()
    values.append_flag_values(train.FLAGS)
    values(['train.py'] + list(args))
    opts = train.flags_lib.options(values)
    train.validate(opts)
    return opts


@pytest.mark.parametrize('name,distribution,types', [
    ('tfjob-ps.yaml', 'ps', {'Chief', 'Worker', 'PS'}),
    ('tfjob-collective.yaml', 'collective', {'Chief', 'Worker'}),
])
def test_tfjob_runs_train_py_with_valid_flags(name, distribution, types):
    job = manifest(name)
    assert job['apiVersion'] == 'kubeflow.org/v1' and job['kind'] == 'TFJob'
    specs = job['spec']['tfReplicaSpecs']
    assert set(specs) == types
    containers = {kind: spec['template']['spec']['containers'][0]
                  for kind, spec in specs.items()}
    images = {c['image'] for c in containers.values()}
    argument_lists = {tuple(c['args']) for c in containers.values()}
    assert len(images) == 1 and len(argument_lists) == 1  # one image, one command line
    opts = parsed_options(argument_lists.pop())
    assert opts.distribution == distribution
    for kind, container in containers.items():
        gpus = container.get('resources', {}).get('limits', {}).get('nvidia.com/gpu', 0)
        assert gpus == (0 if kind == 'PS' else opts.num_gpus), kind
        mounts = {m['mountPath'] for m in container['volumeMounts']}
        assert any(opts.model_dir.startswith(m + '/') for m in mounts), kind
        assert any(opts.data_dir.startswith(m + '/') for m in mounts), kind


def test_the_image_runs_train_py():
    with open(os.path.join(DOCS, 'Dockerfile')) as f:
        text = f.read()
    assert 'tensorflow[and-cuda]==2.15.1' in text
    assert 'ENTRYPOINT ["python", "/app/train.py"]' in text


def test_the_check_itself_refuses_what_train_py_refuses():
    with pytest.raises(absl_flags.Error):
        parsed_options(['--batchsize=64'])
    with pytest.raises(train.UsageError):
        parsed_options(['--resnet_size=42'])
