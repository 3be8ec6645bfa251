"""Every documented command line runs with the interpreter the docs name, and parses.

The lines: the indented code blocks and the inline code of README.md and docs/*.md, and
the commands in the headers of the recipe flagfiles (docs/recipes/*.flags). The
convention (docs/setup.md): the environment's programs by their path -- a line that starts
train.py, a tools/ program, pytest, pip, tensorboard or img2dataset does it with
`.venv/bin/python` (`.venv/bin/pip`, ...), no other interpreter. Each program's line is
parsed in this process, which runs on that interpreter: train.py's flag parser and
validation and distribute.plan for the process (for a launcher command every task it would
start, with the TF_CONFIG and GPUs the launcher gives it; a cluster of --worker_hosts as
train.py makes it), the other tools' own parsers; and `.venv/bin/python <program> --help`
starts every program the docs name. Placeholders (`...`, `<train.py flags>`, `[optional]`)
are dropped; a placeholder TF_CONFIG becomes a two-worker cluster. The TFJob manifests are
tests/test_kubernetes.py's; their flags are planned here too."""
import glob
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from absl import flags as absl_flags

from mlimages.distributed import cluster_flags, distribute
import train
import resnet
from helpers import ROOT
from mlimages.distributed import local_cluster as launcher

VENV = '.venv/bin/'
PYTHON = VENV + 'python'
# What runs in the environment: by its path, always.
ENVIRONMENT_PROGRAMS = ('python', 'python3', 'pip', 'pip3', 'tensorboard', 'img2dataset',
                        'pytest')
PROGRAMS = ['train.py'] + sorted(os.path.basename(p) for p in
                                 glob.glob(os.path.join(ROOT, 'tools', '*.py')))
PLACEHOLDER_CLUSTER = json.dumps({'cluster': {'chief': ['hostA:2222'],
                                              'worker': ['hostB:2222']},
                                  'task': {'type': 'chief', 'index': 0}})


def code_lines(path):
    """The logical lines of the indented code blocks: continuations (a trailing
    backslash, or a quote left open) joined, comment lines left out; and the inline code
    of the other lines (outside fenced blocks) that holds more than one word."""
    lines, current, fenced = [], '', False
    with open(path) as f:
        for raw in f:
            if raw.startswith('```'):
                fenced = not fenced
            if not raw.startswith('    '):
                if current:
                    lines.append(current)
                current = ''
                if not fenced:
                    lines += [span for span in re.findall(r'`([^`]+)`', raw) if ' ' in span]
                continue
            if raw.strip().startswith('#'):  # a comment line of its own
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


def flagfile_commands(path):
    """The command lines of a recipe flagfile's header comments."""
    with open(path) as f:
        return [line.lstrip('#').strip() for line in f
                if line.startswith('#') and 'train.py' in line and VENV in line]


def documented_lines():
    paths = [os.path.join(ROOT, 'README.md')] + sorted(
        glob.glob(os.path.join(ROOT, 'docs', '*.md')))
    found = [(path, line) for path in paths for line in code_lines(path)]
    found += [(path, line) for path in sorted(glob.glob(os.path.join(ROOT, 'docs', 'recipes',
                                                                     '*.flags')))
              for line in flagfile_commands(path)]
    return [('%s: %s' % (os.path.relpath(path, ROOT), line), line) for path, line in found]


def runs_in_the_environment(tokens):
    """The index of the token that starts an environment program, or None: a checkout
    program or pytest run by a Python, or pip, tensorboard, img2dataset, pytest."""
    for i, token in enumerate(tokens):
        name = os.path.basename(token)
        if name in ENVIRONMENT_PROGRAMS and name.startswith('python'):
            rest = tokens[i + 1:i + 3]
            if rest and (os.path.basename(rest[0]) in PROGRAMS or rest[:2] == ['-m', 'pytest']):
                return i
        elif name in ENVIRONMENT_PROGRAMS:
            return i
    return None


def commands():
    """[(where, tokens, index of the interpreter or program)] of every documented line
    that runs something of the environment."""
    found = []
    for where, line in documented_lines():
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        start = runs_in_the_environment(tokens)
        if start is not None:
            found.append((where, tokens, start))
    return found


def program_lines():
    """[(where, env assignments, script, arguments)] of the lines that start a program."""
    found = []
    for where, tokens, start in COMMANDS:
        scripts = [i for i, t in enumerate(tokens) if os.path.basename(t) in PROGRAMS]
        if not scripts or scripts[0] != start + 1:
            continue
        script = scripts[0]
        env = dict(t.split('=', 1) for t in tokens[:start] if '=' in t)
        args = [t for t in tokens[script + 1:] if '...' not in t and
                not re.search(r'<.*>', t) and not t.startswith('[') and
                not t.endswith(']') and t != '--help']
        found.append((where, env, os.path.basename(tokens[script]), args))
    return found


def parse(args):
    values = absl_flags.FlagValues()
    values.append_flag_values(train.FLAGS)
    values.unparse_flags()  # the Flag objects are shared: no value of an earlier command
    values(['train.py'] + list(args))
    settings = train.flags_lib.settings(values)
    train.flag_checks.validate(settings)
    train.check_what_they_name(settings)
    return settings


def plan_task(settings, environ, gpus):
    """distribute.plan and the data format of one process seeing `gpus` GPUs."""
    cluster = settings.cluster
    plan = distribute.plan(cluster.distribution, settings.devices.num_gpus, cluster.worker_num,
                           cluster.worker_id, settings.data.batch_size, gpus, environ)
    distribute.check_all_reduce_alg(cluster.all_reduce_alg, plan.distribution)
    resnet.resolve_data_format(settings.model.data_format, gpus > 0,
                               cpu_fallback=not plan.trains)
    return plan


def check_train(env, args):
    settings = parse(args)
    config = env.get('TF_CONFIG')
    if config is not None and '...' in config:
        config = PLACEHOLDER_CLUSTER
    environ = {'TF_CONFIG': config} if config else {}
    # --worker_hosts: the TF_CONFIG train.py makes
    cluster_flags.setup(settings.cluster, settings.devices.num_gpus, environ)
    plan_task(settings, environ, settings.devices.num_gpus)
    return 1


def check_launcher(args):
    split = args.index('--') if '--' in args else len(args)
    own, train_flags = args[:split], args[split + 1:]
    options = launcher.build_parser().parse_args(own)
    ps = options.ps if options.distribution == 'ps' else 0
    cluster = launcher.cluster_addresses(options.workers, ps, ports=list(range(
        1, options.workers + ps + 1)))
    names = launcher.task_names(cluster) + ([('evaluator', 0)] if options.evaluator else [])
    settings = parse(train_flags + ['--distribution=' + options.distribution])
    gpus_per_task = (settings.devices.num_gpus if options.gpus_per_task is None
                     else options.gpus_per_task)
    gpus = launcher.task_gpus(names, gpus_per_task, options.evaluator_gpus, None)
    for task_type, index in names:
        visible = gpus['%s:%d' % (task_type, index)]
        plan_task(settings, {'TF_CONFIG': cluster_flags.tf_config(cluster, task_type, index)},
                  len(visible.split(',')) if visible else 0)
    return len(names)


def check_plan_run(args):
    """tools/plan_run.py's parsing and planning, up to the figures."""
    from mlimages.cli import plan_run
    from mlimages.run import run_plan
    own, train_flags = plan_run.build_parser().parse_known_args(args)
    settings = parse(train_flags)
    run_plan.job(settings.cluster, settings.devices.num_gpus, settings.data.batch_size, {})
    assert own.train_images or settings.data.data_dir
    return 1


def tool_parsers():
    """{program: parse(arguments)} with each tool's own parser, as its main parses."""
    from mlimages.bench import benchmark, graph_size, memory_peak, ps_placement
    from mlimages.cli import export_onnx, extract_features, predict
    from mlimages.recordkit import (check_tfrecords, convert_tfrecords, img2dataset_to_list,
                                    make_image_list, make_options, urls_to_img2dataset)
    plain = lambda build: lambda a: build().parse_args(a)
    intermixed = lambda build: lambda a: build().parse_intermixed_args(a)
    return {'benchmark.py': plain(benchmark.build_parser),
            'check_tfrecords.py': plain(check_tfrecords.build_parser),
            'export_onnx.py': plain(export_onnx.build_parser),
            'extract_features.py': intermixed(extract_features.build_parser),
            'graph_size.py': plain(graph_size.build_parser),
            'img2dataset_to_list.py': plain(img2dataset_to_list.build_parser),
            'memory_peak.py': plain(memory_peak.build_parser),
            'predict.py': intermixed(predict.build_parser),
            'ps_placement.py': plain(ps_placement.build_parser),
            'urls_to_img2dataset.py': plain(urls_to_img2dataset.build_parser),
            'convert_tfrecords.py': plain(convert_tfrecords.build_parser),
            'make_tfrecords.py': intermixed(make_options.build_parser),
            'make_image_list.py': plain(make_image_list.build_parser)}


def check(env, script, args):
    if script == 'train.py':
        return check_train(env, args)
    if script == 'launch_local_cluster.py':
        return check_launcher(args)
    if script == 'plan_run.py':
        return check_plan_run(args)
    tool_parsers()[script](args)
    return 1


COMMANDS = commands()
DOCUMENTED = program_lines()


def test_the_docs_have_commands_of_the_programs():
    scripts = {script for _, _, script, _ in DOCUMENTED}
    assert {'train.py', 'launch_local_cluster.py', 'make_tfrecords.py', 'predict.py',
            'plan_run.py', 'check_tfrecords.py', 'extract_features.py'} <= scripts
    assert len(DOCUMENTED) >= 60
    assert any('--distribution collective' in where for where, _, _, _ in DOCUMENTED)
    assert any(where.startswith('docs/recipes/') for where, _, _, _ in DOCUMENTED)


def test_every_documented_command_names_the_environment():
    """`.venv/bin/python train.py`, `.venv/bin/pip`, ...: never a bare `python` or `pip`."""
    wrong = [where for where, tokens, start in COMMANDS if not tokens[start].startswith(VENV)
             or tokens[start] != VENV + os.path.basename(tokens[start])]
    assert wrong == []
    assert len(COMMANDS) > len(DOCUMENTED)  # pip, tensorboard, pytest lines too


def test_these_tests_run_on_the_interpreter_the_docs_name():
    """The parses below happen in this process: it must be the docs' `.venv/bin/python`."""
    assert os.path.realpath(sys.prefix) == os.path.realpath(os.path.join(ROOT, '.venv'))


@pytest.mark.parametrize('script', sorted({script for _, _, script, _ in DOCUMENTED}))
def test_the_docs_interpreter_starts_every_documented_program(script):
    path = script if script == 'train.py' else os.path.join('tools', script)
    result = subprocess.run([os.path.join(ROOT, PYTHON), path, '--help'], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'usage: ' in result.stdout


@pytest.mark.parametrize('where,env,script,args', DOCUMENTED,
                         ids=[where.split(':')[0] + ':%d' % i
                              for i, (where, _, _, _) in enumerate(DOCUMENTED)])
def test_documented_command_parses_and_plans(where, env, script, args, monkeypatch):
    monkeypatch.chdir(ROOT)  # as written: from the checkout's root (flagfiles are relative)
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
            settings = parse(container['args'])
            gpus = container.get('resources', {}).get('limits', {}).get('nvidia.com/gpu', 0)
            config = json.dumps({'cluster': cluster,
                                 'task': {'type': kind.lower(), 'index': 0}})
            plan_task(settings, {'TF_CONFIG': config}, gpus)


@pytest.mark.parametrize('line', [
    ".venv/bin/python tools/launch_local_cluster.py --workers 4 --ps 1 -- --num_gpus=2",
    ".venv/bin/python tools/launch_local_cluster.py --workers 2 --ps 1 --gpus_per_task 0 -- "
    "--data_format=NCHW"])
def test_the_check_refuses_a_broken_command(line):
    """The launcher command the docs once had (ps-mode workers with 2 GPUs), and NCHW for a
    training task that gets no GPU, are refused."""
    tokens = shlex.split(line)
    with pytest.raises((distribute.ConfigError, train.UsageError, SystemExit)):
        check({}, 'launch_local_cluster.py', tokens[2:])


def test_the_checks_find_a_bare_interpreter_and_a_bad_tool_line():
    assert runs_in_the_environment(shlex.split('python train.py --demo')) == 0
    assert runs_in_the_environment(shlex.split('srun python3 tools/predict.py x')) == 1
    assert runs_in_the_environment(shlex.split('python3 -m venv .venv')) is None
    assert runs_in_the_environment(shlex.split('NO_X=1 pip install -r r.txt')) == 1
    with pytest.raises(SystemExit):
        check({}, 'predict.py', ['--top_k', '0', 'a.jpg'])  # no model, and a bad top_k


# --- Every documented training run against its rule (mlimages/run/lr_rule.py) ----------
# A documented lr may be a rounded figure: within 5 % of its rule (train.py warns at 2x).
LR_TOLERANCE = 0.05
TRAINING_MODES = ('train', 'train_and_eval')
# train.sh's warm-up start at the paper's 4,096 images a step (lr_rule's docstring).
PRETRAINING_WARMUP_LR = 0.01


def pretraining_warmup_lr(batch):
    """The docs' rule of the warm-up start at B: lr_warmup = 0.01 x B / 4,096."""
    from mlimages.run import lr_rule
    return PRETRAINING_WARMUP_LR * batch / lr_rule.PRETRAINING_BATCH


def scaled_steps(steps, batch, kind):
    """The docs' rule of a step count of the kind's reference run at B: steps x reference
    B / B."""
    from mlimages.run import lr_rule
    reference = (lr_rule.PRETRAINING_BATCH if kind == lr_rule.PRETRAINING
                 else lr_rule.FINE_TUNE_BATCH)
    return int(round(steps * reference / float(batch)))
IMAGE = 'ml-images-trainer'  # the Dockerfile's image: its entry point is train.py


def docker_runs():
    """[(where, train.py arguments)] of the documented `docker run ... ml-images-trainer`."""
    found = []
    for where, line in documented_lines():
        if not line.startswith('docker run') or IMAGE not in line:
            continue
        tokens = shlex.split(line)
        if IMAGE in tokens:
            found.append((where, tokens[tokens.index(IMAGE) + 1:]))
    return found


def tfjob_runs():
    """[(where, args, TF_CONFIG of its chief)] of the TFJob manifests (their trainers)."""
    yaml = pytest.importorskip('yaml')
    found = []
    for name in ('tfjob-collective.yaml', 'tfjob-ps.yaml'):
        with open(os.path.join(ROOT, 'docs', 'kubernetes', name)) as f:
            specs = yaml.safe_load(f)['spec']['tfReplicaSpecs']
        cluster = {kind.lower(): ['%s-%d:2222' % (kind.lower(), i)
                                  for i in range(spec.get('replicas', 1))]
                   for kind, spec in specs.items() if kind != 'Evaluator'}
        args = specs['Chief']['template']['spec']['containers'][0]['args']
        found.append(('docs/kubernetes/' + name, args, json.dumps(
            {'cluster': cluster, 'task': {'type': 'chief', 'index': 0}})))
    return found


def slurm_tasks(path):
    """Tasks of the doc's sbatch script: #SBATCH --nodes x --ntasks-per-node."""
    with open(os.path.join(ROOT, path)) as f:
        text = f.read()
    return (int(re.search(r'#SBATCH --nodes=(\d+)', text).group(1)) *
            int(re.search(r'#SBATCH --ntasks-per-node=(\d+)', text).group(1)))


def run_batch(where, env, script, args):
    """(settings, images a global step) of a documented training command: a worker's step for
    asynchronous ps (lr_rule's batch)."""
    if script == 'launch_local_cluster.py':
        split = args.index('--') if '--' in args else len(args)
        options = launcher.build_parser().parse_args(args[:split])
        settings = parse(args[split + 1:] + ['--distribution=' + options.distribution])
        ps = options.ps if options.distribution == 'ps' else 0
        cluster = launcher.cluster_addresses(options.workers, ps, ports=list(range(
            1, options.workers + ps + 1)))
        gpus = (settings.devices.num_gpus if options.gpus_per_task is None
                else options.gpus_per_task)
        plan = plan_task(settings, {'TF_CONFIG': cluster_flags.tf_config(cluster, 'chief', 0)},
                         gpus)
        return settings, plan.images_per_global_step
    settings = parse(args)
    num_gpus = settings.devices.num_gpus
    if where.split(': ', 1)[-1].startswith('srun '):  # Slurm: one collective task a rank
        return settings, (slurm_tasks(where.split(':')[0]) * num_gpus
                          * settings.data.batch_size)
    config = env.get('TF_CONFIG')
    environ = {'TF_CONFIG': config} if config else {}
    cluster_flags.setup(settings.cluster, num_gpus, environ)
    return settings, plan_task(settings, environ, num_gpus).images_per_global_step


def given(args, name):
    """Whether --name is on the command line or in its --flagfile."""
    text = ' '.join(args)
    for path in re.findall(r'--flagfile=(\S+)', text):
        with open(os.path.join(ROOT, path)) as f:
            text += '\n' + f.read()
    return re.search(r'(^|\s)--%s=' % name, text) is not None


def stated_text(where, args):
    """The doc's text and that of the flagfiles its command reads."""
    with open(os.path.join(ROOT, where.split(':')[0])) as f:
        text = f.read()
    for path in re.findall(r'--flagfile=(\S+)', ' '.join(args)):
        with open(os.path.join(ROOT, path)) as f:
            text += '\n' + f.read()
    return text.replace(',', '')


def training_row(where, env, script, args):
    """What a documented training command is: (kind, global batch, lr, rule, checkpoint GiB,
    epochs or None) -- None for a line that does not train."""
    from mlimages.run import lr_rule, run_plan
    settings, batch = run_batch(where, env, script, args)
    schedule, output = settings.schedule, settings.output
    kind = lr_rule.run_kind(settings.data.label_type, settings.finetune.pretrain_ckpt,
                            settings.task.demo)
    if settings.task.mode not in TRAINING_MODES:
        return None
    kept = min(output.max_to_keep, run_plan.checkpoint_saves(schedule.max_iter, output.snapshot)
               ) if schedule.max_iter > 0 else output.max_to_keep
    images = {11166: lr_rule.ML_IMAGES_TRAIN, 1000: lr_rule.IMAGENET_TRAIN}.get(
        settings.model.class_num)
    return dict(schedule=schedule, kind=kind, batch=batch, lr=schedule.lr,
                rule=lr_rule.rule_lr(kind, batch),
                disk=kept * run_plan.run_checkpoint_bytes(settings) / run_plan.GiB,
                epochs=schedule.max_iter * batch / images if images and schedule.max_iter > 0
                else None)


def training_commands():
    """[(where, env, script, args)]: every documented command that may train."""
    runs = [(w, e, s, a) for w, e, s, a in DOCUMENTED
            if s in ('train.py', 'launch_local_cluster.py') and '--help' not in w]
    runs += [(w, {}, 'train.py', a) for w, a in docker_runs()]
    runs += [(w, {'TF_CONFIG': c}, 'train.py', a) for w, a, c in tfjob_runs()]
    return runs


def fragment(where):
    """A line that shows flags of a run, not a run: `...` stands for the rest."""
    return '...' in where or '\u2026' in where or '--flagfile=<' in where


def rule_problems(where, args, row):
    """What is wrong with a documented run against its rule (an empty list: nothing)."""
    from mlimages.run import lr_rule
    problems, schedule, batch = [], row['schedule'], row['batch']
    if row['kind'] == lr_rule.DEMO:
        return []
    if fragment(where):  # only what it states: a --lr must be its rule's
        return ['lr %g, the rule %g' % (row['lr'], row['rule'])] if given(args, 'lr') and abs(
            row['lr'] / row['rule'] - 1) > LR_TOLERANCE else []
    if abs(row['lr'] / row['rule'] - 1) > LR_TOLERANCE:
        problems.append('lr %g, the %s rule %g at %d' % (row['lr'], row['kind'], row['rule'],
                                                         batch))
    steps = [('lr_decay_step', 110000 if row['kind'] == lr_rule.PRETRAINING else 150000)]
    if row['kind'] == lr_rule.PRETRAINING and schedule.warmup > 0:
        steps += [('warmup', 35200), ('lr_warmup_decay_step', 4400)]
        if abs(schedule.lr_warmup / pretraining_warmup_lr(batch) - 1) > LR_TOLERANCE:
            problems.append('lr_warmup %g' % schedule.lr_warmup)
    # The reference runs' step counts belong to their data: checked where it is theirs.
    for name, reference in steps if row['epochs'] is not None else ():
        value, rule = getattr(schedule, name), scaled_steps(reference, batch, row['kind'])
        if value and abs(value / rule - 1) > LR_TOLERANCE:
            problems.append('--%s=%d, the rule %d' % (name, value, rule))
    problems += ['no --%s' % name for name in ('batch_size', 'max_to_keep')
                 if not given(args, name)]
    text = stated_text(where, args)
    if '%.1f GiB' % row['disk'] not in text:
        problems.append('checkpoint disk %.1f GiB not stated' % row['disk'])
    if row['epochs'] is not None and not re.search(
            r'\b%d epochs?\b|\bepoch %d\b' % ((round(row['epochs']),) * 2), text):
        problems.append('%d epochs not stated' % round(row['epochs']))
    return problems


TRAINING = training_commands()


def test_every_documented_training_run_follows_its_rule():
    """Each documented training command (README, docs/*.md, the recipe flagfiles, the Docker
    runs, the TFJob manifests): its global batch, its lr within 5 % of its kind's rule
    (warm-up and step counts too), --batch_size and --max_to_keep given, the checkpoint
    disk stated in its doc or flagfile, and its epochs where the data's size is known."""
    wrong, rows = [], 0
    for where, env, script, args in TRAINING:
        row = training_row(where, env, script, args)
        if row is not None:
            rows += 1
            wrong += ['%s\n  -> %s' % (where, p) for p in rule_problems(where, args, row)]
    assert wrong == []
    assert rows >= 20


def test_the_rule_check_finds_an_insane_run():
    """The README's first run as it was: lr 0.08 at 64 images a step, no --max_to_keep."""
    args = shlex.split('--data_dir=/data/ml-images --class_num=11166 --resnet_size=101 '
                       '--batch_size=64 --lr=0.08 --lr_decay_step=110000 --max_iter=440000 '
                       '--warmup=35200 --lr_warmup=0.01 --lr_warmup_decay_step=4400')
    where = 'README.md: .venv/bin/python train.py ' + ' '.join(args)
    row = training_row(where, {}, 'train.py', args)
    assert row['batch'] == 64 and row['rule'] == pytest.approx(0.00125)
    problems = rule_problems(where, args, row)
    assert problems[0] == 'lr 0.08, the pre-training rule 0.00125 at 64'
    assert 'no --max_to_keep' in problems and len(problems) >= 6
