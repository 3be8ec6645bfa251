"""What a training run's flags imply, without training: the global batch, the steps an
epoch and the epochs of --max_iter, the warm-up and the decays, the checkpoints and the
disk they take, the GPU memory a replica needs (and with --gpu_memory whether it fits),
the images/s a wall time needs, and the learning-rate curve as a PNG
(mlimages/run/run_plan.py; docs/recipes.md).

    .venv/bin/python tools/plan_run.py --train_images 17609752 --hours 90 --lr_png lr.png \\
        --flagfile=docs/recipes/mlimages-resnet101-4x8.flags

Its own options (--train_images, --hours, --images_per_sec, --gpu_memory, --lr_png) and
train.py's flags, the --flagfile included, parsed and checked as train.py does; a cluster
of --worker_hosts, TF_CONFIG or Slurm is planned for, no GPU is needed. Exit status 0, 2 on
bad usage (one line).
"""
import argparse
import os

from mlimages.cli import entry
from mlimages.config import startup
from mlimages.errors import UsageError

PROG = 'plan_run.py'


def build_parser():
    parser = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        usage='%(prog)s [--train_images N] [--hours H] [--images_per_sec R] [--gpu_memory GB] '
              '[--lr_png FILE] [train.py flags, e.g. --flagfile=FILE]',
        description=__doc__.split('\n\n')[0].replace('\n', ' '),
        epilog='Every other argument is a train.py flag (.venv/bin/python train.py --help).')
    parser.add_argument('--train_images', type=int, metavar='N',
                        help='training images (default: the records.txt count of '
                             '<data_dir>/train, as train.py\'s log has it)')
    parser.add_argument('--hours', type=float, metavar='H',
                        help='a wall time: say the images/s (and a GPU\'s share) it needs')
    parser.add_argument('--images_per_sec', type=float, metavar='R',
                        help='a job speed: say the wall time it gives')
    parser.add_argument('--gpu_memory', type=float, metavar='GB',
                        help='a GPU\'s memory (e.g. 16, 40, 80): say whether a replica fits '
                             'it and the largest --batch_size that does')
    parser.add_argument('--lr_png', metavar='FILE',
                        help='draw the learning rate against the epoch (log scale) here')
    return parser


def main(argv=None):
    """Command-line entry point; returns the exit status (0 or 2)."""
    return entry.run(PROG, lambda: build_parser().parse_known_args(argv), plan_and_say,
                     (UsageError,), collapse=False)


def plan_and_say(parsed):
    """Prints the plan of the parsed (own arguments, train.py flags) and draws --lr_png;
    returns the exit status (0)."""
    args, train_flags = parsed
    startup.before_tensorflow(PROG, [])
    from mlimages.run import run_plan
    settings = train_settings(train_flags)
    plan, gpus = run_plan.job(settings.cluster, settings.devices.num_gpus,
                              settings.data.batch_size, dict(os.environ))
    images = run_plan.training_images(settings.data, args.train_images)
    print('\n'.join(run_plan.plan_lines(settings, plan, gpus, images, args.hours,
                                        args.images_per_sec, args.gpu_memory)))
    if args.lr_png:
        draw_learning_rates(args.lr_png, settings.schedule, settings.model.resnet_size, plan,
                            images)
    return 0


def train_settings(train_flags):
    """train.py's flags among the arguments, parsed and checked as train.py does, into a
    FlagValues of their own (the global one stays unparsed); a bad one is a UsageError."""
    from absl import flags as absl_flags
    import flags as flags_lib
    values = absl_flags.FlagValues()
    values.append_flag_values(flags_lib.FLAGS)
    values.unparse_flags()  # the Flag objects are train.py's: no value of an earlier parse
    try:
        values([PROG] + train_flags)
        settings = flags_lib.settings(values)
    except absl_flags.Error as e:
        raise UsageError(str(e)) from None
    from mlimages.config import flag_checks
    flag_checks.validate(settings)
    return settings


def draw_learning_rates(path, schedule, resnet_size, plan, images):
    """--lr_png: the learning rate of the schedule group against the epoch, drawn at path,
    and the line that says so."""
    from mlimages.run import run_plan
    steps = run_plan.curve_steps(schedule)
    run_plan.draw_curve(path, steps, run_plan.learning_rates(schedule, steps),
                        images / float(plan.images_per_global_step),
                        'learning rate: ResNet-%d, %d images a step, %d steps' % (
                            resnet_size, plan.images_per_global_step, schedule.max_iter))
    print('learning-rate curve: %s' % path)
