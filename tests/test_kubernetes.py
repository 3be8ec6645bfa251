"""docs/kubernetes: the Kubeflow TFJob manifests run train.py with flags train.py accepts
and validates, the same in every replica, GPUs as --num_gpus says, a ps without GPUs; a
GPU pod has a /dev/shm for NCCL and keeps the CUDA compile cache on its node, in the layout
TensorFlow's layout pass would choose; every `docker run` of a GPU in the docs too."""
import glob
import os
import re

import pytest
from absl import flags as absl_flags

import resnet
import train

yaml = pytest.importorskip('yaml')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, 'docs', 'kubernetes')


def image_cache_path():
    """The Dockerfile's CUDA_CACHE_PATH."""
    with open(os.path.join(DOCS, 'Dockerfile')) as f:
        return re.search(r'^ENV CUDA_CACHE_PATH=(\S+)$', f.read(), re.M).group(1)


def manifest(name):
    with open(os.path.join(DOCS, name)) as f:
        return yaml.safe_load(f)


def parsed_settings(args):
    """train.py's own parser and validation on the manifest's arguments."""
    values = absl_flags.FlagValues()
    values.append_flag_values(train.FLAGS)
    values.unparse_flags()  # the Flag objects are shared: no value of an earlier manifest
    values(['train.py'] + list(args))
    settings = train.flags_lib.settings(values)
    train.flag_checks.validate(settings)
    train.check_what_they_name(settings)
    return settings


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
    settings = parsed_settings(argument_lists.pop())
    assert settings.cluster.distribution == distribution
    for kind, container in containers.items():
        gpus = container.get('resources', {}).get('limits', {}).get('nvidia.com/gpu', 0)
        assert gpus == (0 if kind == 'PS' else settings.devices.num_gpus), kind
        mounts = {m['mountPath'] for m in container['volumeMounts']}
        assert any(settings.output.model_dir.startswith(m + '/') for m in mounts), kind
        assert any(settings.data.data_dir.startswith(m + '/') for m in mounts), kind


def test_the_image_runs_train_py():
    with open(os.path.join(DOCS, 'Dockerfile')) as f:
        text = f.read()
    assert 'tensorflow[and-cuda]==2.15.1' in text
    assert 'ENTRYPOINT ["python", "/app/train.py"]' in text


def test_the_check_itself_refuses_what_train_py_refuses():
    with pytest.raises(absl_flags.Error):
        parsed_settings(['--batchsize=64'])
    with pytest.raises(train.UsageError):
        parsed_settings(['--resnet_size=42'])


@pytest.mark.parametrize('name', ['tfjob-ps.yaml', 'tfjob-collective.yaml'])
def test_gpu_pods_get_shared_memory_a_node_compile_cache_and_the_fast_layout(name):
    specs = manifest(name)['spec']['tfReplicaSpecs']
    for kind, spec in specs.items():
        pod = spec['template']['spec']
        container = pod['containers'][0]
        if not container.get('resources', {}).get('limits', {}).get('nvidia.com/gpu'):
            continue
        volumes = {v['name']: v for v in pod['volumes']}
        mounted = {m['mountPath']: volumes[m['name']] for m in container['volumeMounts']}
        assert mounted['/dev/shm']['emptyDir']['medium'] == 'Memory', kind
        assert mounted[image_cache_path()]['hostPath']['path'], kind  # one per node
        model = parsed_settings(container['args']).model
        # Nothing the layout pass would convert again (resnet.resolve_data_format).
        assert resnet.resolve_data_format(model.data_format, True, dtype=model.dtype) == \
            resnet.resolve_data_format('auto', True, dtype=model.dtype), kind


def test_every_docker_run_of_a_gpu_gives_nccl_shared_memory_and_keeps_the_cache():
    runs = []
    for path in [os.path.join(ROOT, 'README.md')] + glob.glob(os.path.join(ROOT, 'docs',
                                                                            '*.md')):
        with open(path) as f:
            runs += [(path, line) for line in f if 'docker run' in line and '--gpus' in line]
    assert len(runs) >= 2  # the README's block, the one copy (setup.md links it)
    for path, line in runs:
        assert '--shm-size=' in line or '--ipc=host' in line, (path, line)
        assert ':%s ' % image_cache_path() in line, (path, line)
