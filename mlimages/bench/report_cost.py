"""What the evaluation's per-class report (run/class_report.py) costs at the end of an
evaluation (tools/benchmark.py --report_cost): the metric histograms of --rc_classes
classes filled as a --rc_images-image split leaves them (synthetic counts: positives at a
log-normal prevalence, 5 % of the classes none, negatives in low score bins), then, in
turns and in the evaluation's order, the report hook's end (the per-class AP, the table,
the PR curves and the AP histogram) and the Estimator's read of the mAP values (which
take the AP the report computed: metrics.read_once). Printed: the seconds and the
resident memory above the start of each (sampled every 10 ms), the table's bytes and the
events' bytes.
"""
import os
import resource
import tempfile
import threading
import time

import numpy as np

PROG = 'benchmark.py'


def add_arguments(parser):
    group = parser.add_argument_group('the per-class report (mlimages/bench/report_cost.py)')
    group.add_argument('--report_cost', action='store_true',
                       help='measure the per-class report at --rc_classes classes instead '
                            'of the default')
    group.add_argument('--rc_classes', type=int, default=11166, help='classes')
    group.add_argument('--rc_images', type=int, default=50000, help='val images')
    group.add_argument('--rc_repeats', type=int, default=2, help='turns')
    group.add_argument('--rc_names', default='',
                       help='a class dictionary of --rc_classes classes, for the names')
    group.add_argument('--rc_dir', default='',
                       help='where the table and events go (default: a new temporary '
                            'directory, named in the output)')


def resident_bytes():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def measured(run):
    """(seconds, peak resident bytes above the start) of run()."""
    start, peak, done = resident_bytes(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], resident_bytes())
            time.sleep(0.01)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.perf_counter()
    run()
    seconds = time.perf_counter() - began
    done.set()
    sampler.join()
    return seconds, max(peak[0], resident_bytes()) - start


def histograms(classes, images, num_bins, seed=0):
    """Positives and valid negatives [classes, num_bins] of a split of `images`."""
    rng = np.random.default_rng(seed)
    prevalence = np.clip(rng.lognormal(-6.0, 1.5, classes), 0.0, 0.3)
    prevalence[rng.random(classes) < 0.05] = 0.0
    positives = rng.binomial(images, prevalence)
    pos = np.zeros((classes, num_bins))
    neg = np.zeros((classes, num_bins))
    for c in range(classes):
        for hist, count, centre in ((pos, positives[c], 0.63), (neg, images - positives[c],
                                                                0.25)):
            bins = np.clip(rng.normal(centre * num_bins, 0.15 * num_bins, count), 0,
                           num_bins - 1).astype(np.int64)
            hist[c] = np.bincount(bins, minlength=num_bins)
    return pos, neg


def main(args):
    """The measurement (module docstring); returns the exit status."""
    import tensorflow.compat.v1 as tf
    from mlimages.data import class_names
    from mlimages.distributed import devices
    from mlimages.model import metrics
    from mlimages.run import class_report
    classes = args.rc_classes
    names = class_names.load_class_names(args.rc_names, classes) if args.rc_names else None
    out = args.rc_dir or tempfile.mkdtemp(prefix='report_cost_')
    os.makedirs(out, exist_ok=True)
    report = class_report.ClassReport(out, names)
    pos, neg = histograms(classes, args.rc_images, metrics.NUM_BINS)
    with tf.Graph().as_default():
        labels = tf.placeholder(tf.float32, [None, classes])
        ops, per_class = metrics.metrics_and_classes(labels, labels)
        step = tf.train.get_or_create_global_step()
        hook = report.hook(per_class)
        hook.begin()
        variables = {v.op.name.split('/')[-1]: v for v in tf.local_variables()}
        with tf.Session(config=devices.session_config()) as session:
            session.run(tf.local_variables_initializer())
            variables['positive_histogram'].load(pos.reshape(-1), session)
            variables['valid_histogram'].load((pos + neg).reshape(-1), session)
            del pos, neg
            with tf.Graph().as_default():  # the writer the Estimator opens first
                tf.summary.FileWriterCache.get(out).flush()
            turns = {'the report': [], 'then the mAPs': []}
            events = []
            empty = {labels: np.zeros((0, classes), np.float32)}
            for turn in range(args.rc_repeats):
                # An empty update: the histograms as they are, the kept AP forgotten.
                session.run([tf.assign(step, turn + 1), ops['mAP'][1]], empty)
                before = event_bytes(out)
                turns['the report'].append(measured(lambda: hook.end(session)))
                events.append(event_bytes(out) - before)
                turns['then the mAPs'].append(measured(lambda: session.run(ops['mAP'][0])))
    print('%s: the per-class report at %d classes, histograms of %d images (%d bins)' % (
        PROG, classes, args.rc_images, metrics.NUM_BINS))
    for what, values in turns.items():
        print('  %-14s %s' % (what, ', '.join('%.1f s, +%d MB' % (s, m / 2 ** 20)
                                              for s, m in values)))
    print('  table %d bytes (%s), events %s bytes an evaluation' % (
        os.path.getsize(report.path), report.path, ', '.join(map(str, events))))
    return 0


def event_bytes(directory):
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)
               if 'tfevents' in f)
