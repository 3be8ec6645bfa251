"""Every train.py and launch_local_cluster.py command line in README.md and docs/*.md (the
indented code blocks) parses and plans: train.py's own flag parser and validation, and
distribute.plan for the process -- for a launcher command for every task it would start,
with the TF_CONFIG and GPUs the launcher gives it. Placeholders (`...`, `<train.py
flags>`) are dropped; a placeholder TF_CONFIG becomes a two-worker cluster. The TFJob
manifests are tests/test_kubernetes.py's; their flags are planned here too."""
import glob
import json
import os
import re
import shlex

import pytest
from absl import flags as absl_flags

from mlimages.distributed import distribute
import train
import resnet
from helpers import ROOT
from tools import launch_local_cluster as launcher

SCRIPTS = ('train.py', 'launch_local_cluster.py')
PLACEHOLDER_CLUSTER = json.dumps({'cluster': {'chief': ['hostA:2222'],
                                              'worker': ['hostB:2222']},
                                  'task': {'type': 'chief', 'index': 0}})


def code_lines(path):
    """The logical lines of the indented code blocks: continuations (a trailing
    backslash, or a quote left open) joined."""
    lines, current = [], ''
    with open(path) as f:
        for raw in f:
            if not raw.startswith('    '):
                if current:
                    lines.append(current)
                current = ''
                continue
            current += raw.strip()
            if current.endswith('\\'):
                current = current[:-1] + ' '
            elif current.count("'") % 2 == 1:
                current += ' '
            else:
                lines.append(current)
                current = ''
    if current:
        lines.append(current)
    return lines


def commands():
    """[(file:line text, env assignments, script, arguments)] of every documented command."""
    found = []
    paths = [os.path.join(ROOT, 'README.md')] + sorted(
        glob.glob(os.path.join(ROOT, 'docs', '*.md')))
    for path in paths:
        for line in code_lines(path):
            try:
                tokens = shlex.split(line, comments=True)
            except ValueError:
                continue
            scripts = [i for i, t in enumerate(tokens) if os.path.basename(t) in SCRIPTS]
            if not scripts or not any(t.startswith('python') for t in tokens[:scripts[0]]):
                continue
            start = scripts[0]
            env = dict(t.split('=', 1) for t in tokens[:start] if '=' in t)
            args = [t for t in tokens[start + 1:] if t != '...' and
                    not re.match(r'^<.*>$', t) and t != '--help']
            found.append(('%s: %s' % (os.path.relpath(path, ROOT), line), env,
                          os.path.basename(tokens[start]), args))
    return found


def parse(args):
    values = absl_flags.FlagValues()
    values.append_flag_values(train.FLAGS)
    values.unparse_flags()  # the Flag objects are shared: no value of an earlier command
    values(['train.py'] + list(args))
    opts = train.flags_lib.options(values)
    train.validate(opts)
    return opts


def plan_task(opts, environ, gpus):
    """distribute.plan and the data format of one process seeing `gpus` GPUs."""
    plan = distribute.plan(opts.distribution, opts.num_gpus, opts.worker_num, opts.worker_id,
                           opts.batch_size, gpus, environ)
    distribute.check_all_reduce_alg(opts.all_reduce_alg, plan.distribution)
    resnet.resolve_data_format(opts.data_format, gpus > 0, cpu_fallback=not plan.trains)
    return plan


def check(env, script, args):
    if script == 'train.py':
        opts = parse(args)
        config = env.get('TF_CONFIG')
        if config is not None and '...' in config:
            config = PLACEHOLDER_CLUSTER
        plan_task(opts, {'TF_CONFIG': config} if config else {}, opts.num_gpus)
        return 1
    split = args.index('--') if '--' in args else len(args)
    own, train_flags = args[:split], args[split + 1:]
    options = launcher.make_parser().parse_args(own)
    ps = options.ps if options.distribution == 'ps' else 0
    cluster = launcher.make_cluster(options.workers, ps, ports=list(range(
        1, options.workers + ps + 1)))
    names = launcher.task_names(cluster) + ([('evaluator', 0)] if options.evaluator else [])
    opts = parse(train_flags + ['--distribution=' + options.distribution])
    gpus_per_task = opts.num_gpus if options.gpus_per_task is None else options.gpus_per_task
    gpus = launcher.task_gpus(names, gpus_per_task, options.evaluator_gpus, None)
    for task_type, index in names:
        visible = gpus['%s:%d' % (task_type, index)]
        plan_task(opts, {'TF_CONFIG': launcher.tf_config(cluster, task_type, index)},
                  len(visible.split(',')) if visible else 0)
    return len(names)


DOCUMENTED = commands()


def test_the_docs_have_commands_of_both_programs():
    scripts = {script for _, _, script, _ in DOCUMENTED}
    assert scripts == set(SCRIPTS) and len(DOCUMENTED) >= 20
    assert any('--distribution collective' in where for where, _, _, _ in DOCUMENTED)


@pytest.mark.parametrize('where,env,script,args', DOCUMENTED,
                         ids=[where.split(':')[0] + ':%d' % i
                              for i, (where, _, _, _) in enumerate(DOCUMENTED)])
def test_documented_command_parses_and_plans(where, env, script, args):
    try:
        assert check(env, script, args) >= 1
    except (absl_flags.Error, train.UsageError, distribute.ConfigError, SystemExit) as e:
        pytest.fail('%s\n  -> %s: %s' % (where, type(e).__name__, e))


def test_the_tfjob_flags_plan_for_every_replica():
    """docs/kubernetes: each manifest's one command line, planned for each replica type
    (TFJob sets TF_CONFIG), the ps and the evaluator without GPUs."""
    yaml = pytest.importorskip('yaml')
    for name in ('tfjob-ps.yaml', 'tfjob-collective.yaml'):
        with open(os.path.join(ROOT, 'docs', 'kubernetes', name)) as f:
            specs = yaml.safe_load(f)['spec']['tfReplicaSpecs']
        cluster = {kind.lower(): ['%s-%d:2222' % (kind.lower(), i)
                                  for i in range(spec.get('replicas', 1))]
                   for kind, spec in specs.items() if kind != 'Evaluator'}
        for kind, spec in specs.items():
            container = spec['template']['spec']['containers'][0]
            opts = parse(container['args'])
            gpus = container.get('resources', {}).get('limits', {}).get('nvidia.com/gpu', 0)
            config = json.dumps({'cluster': cluster,
                                 'task': {'type': kind.lower(), 'index': 0}})
            plan_task(opts, {'TF_CONFIG': config}, gpus)


@pytest.mark.parametrize('line', [
    "python tools/launch_local_cluster.py --workers 4 --ps 1 -- --num_gpus=2",
    "python tools/launch_local_cluster.py --workers 2 --ps 1 --gpus_per_task 0 -- "
    "--data_format=NCHW"])
def test_the_check_refuses_a_broken_command(line):
    """The launcher command the docs once had (ps-mode workers with 2 GPUs), and NCHW for a
    training task that gets no GPU, are refused."""
    tokens = shlex.split(line)
    with pytest.raises((distribute.ConfigError, train.UsageError, SystemExit)):
        check({}, 'launch_local_cluster.py', tokens[2:])
