"""The reference pages hold to the code. The flag reference is generated, never written by
hand: docs/flags.md from flags.py (every flag of train.py, by its --help group) and
docs/reference/<tool>.md from each tools/*.py --help. docs/troubleshooting.md's table of exit
statuses has every status of mlimages/errors.py.

After a flag is added or changed, rewrite the pages (from the checkout's root):

    .venv/bin/python tests/test_docs_flags.py
"""
import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS_PAGE = os.path.join('docs', 'flags.md')
TOOLS_DIR = os.path.join('docs', 'reference')
REGENERATE = '.venv/bin/python tests/test_docs_flags.py'
# argparse wraps --help to the terminal: a fixed width makes the pages the same everywhere.
HELP_ENV = dict(os.environ, COLUMNS='100')


def cell(text):
    """A Markdown table cell: no pipe or line break ends it early, no <name> reads as HTML."""
    return ' '.join(str(text).split()).replace('|', '\\|').replace('<', '&lt;')


def tools():
    """The commands of tools/ (Python ones: each has --help)."""
    return sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, 'tools', '*.py')))


def flags_page():
    """docs/flags.md: every train.py flag in a table per --help group, with its default."""
    sys.path.insert(0, ROOT)
    import flags
    lines = ['# Flag reference',
             '',
             'Every flag of `train.py`, grouped as `train.py --help` prints them.',
             'Boolean flags also take the form `--no<name>`.',
             'The options of each tool are on its own page, listed at the end.',
             '',
             'This page is generated from `flags.py`; do not edit it by hand.',
             'To rewrite it after a flag changes, run `%s`.' % REGENERATE]
    for group, names in flags.help_groups():
        lines += ['', '## ' + group, '', '| flag | default | what it does |', '|---|---|---|']
        for name in names:
            flag = flags.FLAGS[name]
            lines.append('| `--%s` | `%r` | %s |' % (name, flag.default, cell(flag.help)))
    if flags.ALIASES:
        lines += ['', '## Other names', '']
        lines += ['- `--%s` is `--%s`.' % pair for pair in flags.ALIASES.items()]
    lines += ['', '## Tools', '', 'Each tool prints the same text with `--help`.', '']
    lines += ['- [%s.py](reference/%s.md)' % (name, name) for name in tools()]
    return '\n'.join(lines) + '\n'


def tool_page(name):
    """docs/reference/<tool>.md: the tool's --help, as it prints it."""
    result = subprocess.run([sys.executable, os.path.join('tools', name + '.py'), '--help'],
                            cwd=ROOT, env=HELP_ENV, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, (name, result.stderr[-2000:])
    return ('# tools/%s.py\n\nThe output of `.venv/bin/python tools/%s.py --help`.\n'
            'This page is generated; to rewrite it, run `%s`.\n\n```text\n%s```\n'
            % (name, name, REGENERATE, result.stdout))


def pages():
    """{path relative to the checkout: text} of every generated page."""
    found = {FLAGS_PAGE: flags_page()}
    for name in tools():
        found[os.path.join(TOOLS_DIR, name + '.md')] = tool_page(name)
    return found


def read(path):
    full = os.path.join(ROOT, path)
    if not os.path.exists(full):
        return None
    with open(full) as f:
        return f.read()


def test_the_flag_reference_is_generated_from_flags_py():
    assert read(FLAGS_PAGE) == flags_page(), 'docs/flags.md is stale: run ' + REGENERATE


def test_every_flag_is_on_the_reference_page():
    import flags
    text = read(FLAGS_PAGE)
    missing = [name for _, names in flags.help_groups() for name in names
               if '| `--%s` |' % name not in text]
    assert missing == []


@pytest.mark.skipif(sys.version_info < (3, 10), reason='argparse before Python 3.10 words '
                    '--help otherwise ("optional arguments:", "[X [X ...]]"); the pages are '
                    'written by 3.10 and later')
def test_each_tool_page_is_its_help():
    stale = [path for path, text in pages().items() if read(path) != text]
    assert stale == [], 'stale: %s; run %s' % (', '.join(stale), REGENERATE)
    made = {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, TOOLS_DIR, '*.md'))}
    assert made == set(pages()) - {FLAGS_PAGE}  # no page of a tool that is gone


def exit_status_table():
    """The first column of the table under troubleshooting.md's "## Exit statuses"."""
    text = read(os.path.join('docs', 'troubleshooting.md'))
    section = text.split('\n## Exit statuses\n', 1)[1].split('\n## ', 1)[0]
    return {int(line.split('|')[1]) for line in section.splitlines()
            if line.startswith('|') and line.split('|')[1].strip().isdigit()}


def test_the_exit_status_table_has_every_status_of_the_errors_module():
    sys.path.insert(0, ROOT)
    from mlimages import errors
    statuses = {0, 1, 2, errors.PEER_LOST_STATUS} | {128 + s for s in errors.SIGNALS}
    assert exit_status_table() == statuses


def test_a_help_text_cannot_break_its_table_row():
    assert cell('a | <b>\n  c') == 'a \\| &lt;b> c'


if __name__ == '__main__':
    os.makedirs(os.path.join(ROOT, TOOLS_DIR), exist_ok=True)
    for path in glob.glob(os.path.join(ROOT, TOOLS_DIR, '*.md')):
        os.remove(path)
    for path, text in pages().items():
        with open(os.path.join(ROOT, path), 'w') as f:
            f.write(text)
        print('wrote', path)
