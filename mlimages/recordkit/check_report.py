"""The text report of tools/check_tfrecords.py (check_tfrecords.check_files' summary): the
files, the bad records and warnings (--max_bad of each), the label statistics and, with
--hierarchy, the labels not closed under ancestors."""
import collections

from mlimages.recordkit.record_checks import LABEL_LENGTH


def _format_index(entry):
    text = 'record %d' % entry['index'] if entry['index'] is not None else 'file'
    if entry.get('name'):
        text += ' (%s)' % entry['name']
    return text


def format_report(summary, max_bad=50):
    """The text report of a check_files summary (a str ending in a newline)."""
    totals = summary['totals']
    seconds = summary['seconds']
    out = ['checked %d files, %d records in %.1f s (%.1f records/s), class_num %d'
           % (totals['files'], totals['records'], seconds,
              totals['records'] / max(seconds, 1e-9), summary['class_num'])]
    out += [''] + _file_lines(summary['files'])
    bad = [b for s in summary['files'] for b in s['bad']]
    if bad:
        out += [''] + _bad_lines(bad, totals['records'], max_bad)
    if totals['warnings']:
        out += [''] + _warning_lines(summary['files'], totals['warnings'], max_bad)
    out += [''] + _label_lines(totals, summary['class_num'], summary['mask_thres'])
    if 'hierarchy' in summary:
        out += [''] + format_hierarchy(summary['hierarchy'], totals['labelled_records'],
                                       summary['mask_thres'])
    out.append('')
    if summary['ok']:
        out.append('OK: no bad records (%d warnings)' % totals['warnings'])
    else:
        out.append('BAD: %d bad records, %d corrupt files' % (totals['bad_records'],
                                                               totals['corrupt_files']))
    return '\n'.join(out) + '\n'


def _file_lines(files):
    """'files:' and a line a file: its records, bad ones, CORRUPT, warnings."""
    out = ['files:']
    for s in files:
        note = []
        if s['bad']:
            note.append('%d bad' % len(s['bad']))
        if s['corrupt']:
            note.append('CORRUPT')
        if s['warning_count']:
            note.append('%d warning%s' % (s['warning_count'],
                                          '' if s['warning_count'] == 1 else 's'))
        out.append('  %s: %d records%s' % (s['path'], s['records'],
                                           ', ' + ', '.join(note) if note else ''))
    return out


def _bad_lines(bad, records, max_bad):
    """The first max_bad bad records, and the likely --class_num when every record's label
    has one other length."""
    out = ['bad records (%d):' % len(bad)]
    for entry in bad[:max_bad]:
        out.append('  %s: %s: %s' % (entry['file'], _format_index(entry), entry['reason']))
    if len(bad) > max_bad:
        out.append('  ... and %d more (--max_bad, or --json for all)'
                   % (len(bad) - max_bad))
    lengths = collections.Counter(
        r for b in bad for r in b['reasons']
        if r.startswith(LABEL_LENGTH) and 'values, expected' in r)
    if len(lengths) == 1 and sum(lengths.values()) == records:
        found = lengths.most_common(1)[0][0].split(':')[1].split()[0]
        out.append('  every record has a label of another length: is --class_num %s?'
                   % found)
    return out


def _warning_lines(files, count, max_bad):
    """The warnings by kind and the first max_bad of those stored (count is exact)."""
    warnings = [w for s in files for w in s['warnings']]
    kinds = collections.Counter()
    for s in files:
        kinds.update(s['warning_kinds'])
    out = ['warnings (%d: %s):' % (count, ', '.join(
        '%s %d' % (k, n) for k, n in sorted(kinds.items())))]
    for entry in warnings[:max_bad]:
        out.append('  %s: %s: %s' % (entry['file'], _format_index(entry),
                                     entry['warning']))
    if count > max_bad:
        out.append('  ... and %d more' % (count - min(max_bad, len(warnings))))
    return out


def _label_lines(totals, class_num, mask_thres):
    """Positives per image, -1 entries and the classes never positive (100 named)."""
    out = ['labels (%d records with a valid label, positive = label >= %g):'
           % (totals['labelled_records'], mask_thres)]
    out.append('  positives per image: %s' % ', '.join(
        '%d: %d' % (k, n) for k, n in enumerate(totals['cardinality']) if n))
    out.append('  -1 (ignore) entries: %d' % totals['ignored_entries'])
    never = totals['never_positive']
    shown = ', '.join(str(c) for c in never[:100]) + (', ...' if len(never) > 100 else '')
    out.append('  classes never positive: %d of %d%s' % (
        len(never), class_num, (': ' + shown) if never else ''))
    return out


def format_hierarchy(found, labelled, mask_thres):
    """The report's lines on labels not closed under ancestors (check_files' hierarchy)."""
    out = ['hierarchy %s (positive = label >= %g):' % (found['file'], mask_thres)]
    if not found['pairs']:
        out.append('  every positive class has positive ancestors (or ignored ones) in all '
                   '%d records' % labelled)
        return out
    out.append('  WARNING: %d of %d records have a positive class with an ancestor that is '
               'not positive: %d (class, ancestor) pairs, positive classes %d'
               % (found['records'], labelled, found['pairs'], found['classes']))
    out.append('  worst classes (index name: pairs):')
    out += ['    %d %s: %d' % (w['class'], w['name'], w['pairs']) for w in found['worst']]
    fixable = found['pairs'] - found['kept_pairs']
    if fixable:
        out.append('  fix: close the labels under ancestors (%d pairs) -- rebuild with '
                   'tools/make_tfrecords.py --hierarchy %s, or convert the records with '
                   'tools/convert_tfrecords.py --hierarchy %s'
                   % (fixable, found['file'], found['file']))
    if found['kept_pairs']:
        out.append('  %d pairs have an ancestor annotated below %g, which closure keeps: '
                   'correct those annotations in the image lists'
                   % (found['kept_pairs'], mask_thres))
    return out
