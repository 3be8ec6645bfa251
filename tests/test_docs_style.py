"""README.md and docs/*.md read in short sentences: the prose outside code blocks, tables
and headings, sentences split at . ! ? before a capital. Code spans count as one word;
a link's target is neither words nor brackets."""
import glob
import os
import re

from helpers import ROOT

MEAN_WORDS = 18     # the mean words a sentence stays under
MOST_WORDS = 40     # no sentence is longer
BRACKETS = 3.0      # round and square brackets a 100 words, at most


def pages():
    return [os.path.join(ROOT, 'README.md')] + sorted(glob.glob(os.path.join(ROOT, 'docs',
                                                                             '*.md')))


def paragraphs(text):
    """The prose paragraphs of a page; a list item starts a paragraph of its own."""
    found, current, fenced = [], [], False
    for line in text.splitlines():
        if line.startswith('```'):
            fenced = not fenced
        if (fenced or line.startswith('```') or line.startswith('    ') or not line.strip()
                or line.lstrip().startswith('|') or line.startswith('#')):
            if current:
                found.append(' '.join(current))
                current = []
            continue
        if re.match(r'\s*([-*]|\d+\.)\s', line) and current:
            found.append(' '.join(current))
            current = []
        current.append(line.strip())
    if current:
        found.append(' '.join(current))
    return found


def sentences(paragraph):
    prose = re.sub(r'`[^`]*`', 'CODE', paragraph)
    prose = re.sub(r'\]\([^)]*\)', ']', prose)
    return [s for s in re.split(r'(?<=[.!?])\s+(?=[A-Z*`\[])', prose) if s.split()]


def figures(paths):
    """(sentences as (words, page, text), words, brackets) over the pages."""
    found, words, brackets = [], 0, 0
    for path in paths:
        with open(path, encoding='utf-8') as f:
            for paragraph in paragraphs(f.read()):
                for sentence in sentences(paragraph):
                    count = len(sentence.split())
                    found.append((count, os.path.relpath(path, ROOT), sentence))
                    words += count
                    brackets += len(re.findall(r'[(\[]', sentence))
    return found, words, brackets


def test_the_measure_splits_sentences_and_skips_code_and_tables(tmp_path):
    page = tmp_path / 'page.md'
    page.write_text('# A title of many words here\n\nOne short one. Two (with a bracket) '
                    'here! A `long code span counts once` and [a link](x/y.md).\n\n'
                    '    .venv/bin/python train.py --a --b --c --d\n\n| a | b |\n|---|---|\n\n'
                    '- An item.\n- Another item\n  continued here.\n')
    found, words, brackets = figures([str(page)])
    assert [n for n, _, _ in found] == [3, 5, 5, 3, 5]
    assert words == 21 and brackets == 2


def test_sentences_are_short():
    found, words, brackets = figures(pages())
    longest = max(found)
    assert longest[0] <= MOST_WORDS, 'a sentence of %d words in %s: %s' % longest
    assert words / len(found) < MEAN_WORDS, '%.1f words a sentence' % (words / len(found))
    assert 100.0 * brackets / words <= BRACKETS, '%.2f brackets a 100 words' % (
        100.0 * brackets / words)
