"""The docs hold together: every relative link of README.md and docs/*.md reaches a file
of the checkout (and its #anchor a heading of that page, as GitHub makes anchors), and no
page is longer than 250 lines (each rule in one place, linked from the others)."""
import glob
import os
import re

import pytest

from helpers import ROOT

PAGES = [os.path.join(ROOT, 'README.md')] + sorted(glob.glob(os.path.join(ROOT, 'docs', '*.md')))
LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
MAX_LINES = 250


def anchor(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces -> '-'."""
    text = re.sub(r'[`*_]', '', heading.strip().lower())
    return re.sub(r'[^\w\- ]', '', text).replace(' ', '-')


def anchors(path):
    with open(path) as f:
        return {anchor(line.lstrip('#')) for line in f if re.match(r'#{1,6} ', line)}


def broken_links(path):
    with open(path) as f:
        text = f.read()
    broken = []
    for target in LINK.findall(text):
        if re.match(r'[a-z][a-z0-9+.-]*:', target):  # https:, mailto:
            continue
        name, _, fragment = target.partition('#')
        dest = os.path.normpath(os.path.join(os.path.dirname(path), name)) if name else path
        if not os.path.exists(dest):
            broken.append(target)
        elif fragment and dest.endswith('.md') and fragment not in anchors(dest):
            broken.append(target)
    return broken


@pytest.mark.parametrize('path', PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_relative_link_reaches_a_file_and_heading(path):
    assert broken_links(path) == []


@pytest.mark.parametrize('path', PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_no_page_is_longer_than_250_lines(path):
    with open(path) as f:
        lines = len(f.read().splitlines())
    assert lines <= MAX_LINES, '%s: %d lines' % (os.path.relpath(path, ROOT), lines)


def test_the_link_check_finds_a_missing_page_and_heading(tmp_path):
    (tmp_path / 'b.md').write_text('# The 8 GPUs: one process\n')
    page = tmp_path / 'a.md'
    page.write_text('[ok](b.md#the-8-gpus-one-process) [no](c.md) [gone](b.md#other) '
                    '[web](https://example.com/x)\n')
    assert broken_links(str(page)) == ['c.md', 'b.md#other']
