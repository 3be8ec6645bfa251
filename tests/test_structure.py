"""The code's shape, read from the source (ast), nothing imported: MAX_LINES is a guide
for a function, so one over it in product code and tools is listed in LONGER with the
reason it reads better whole; and no module is looked up by its name. (Where exception
types come from: tests/test_layout.py.)"""
import ast
import os

from test_layout import parse, product_files

MAX_LINES = 60
# 'path:function' -> why it reads better whole than split (a declarative table, or one
# story that fragments would hide).
LONGER = {
    os.path.join('mlimages', 'recordkit', 'make_options.py') + ':build_parser':
        "argparse table: only declares tools/make_tfrecords.py's options",
}
# 'path:function' -> why it must import a module by its name (a plugin seam); none today.
NAME_LOOKUPS = {}
LOOKUP_CALLS = {'import_module', '__import__'}
LOOKUP_FUNCTIONS = {'owned'}


def functions(tree, prefix=''):
    """(qualified name, node) of every function, nested and methods included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + node.name
            if not isinstance(node, ast.ClassDef):
                yield name, node
            yield from functions(node, name + '.')
        else:
            yield from functions(node, prefix)


def called_name(call):
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(
        call.func, 'id', '')


def test_a_function_over_60_lines_is_listed_with_its_reason():
    long = []
    for path in product_files():
        for name, node in functions(parse(path)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES and '%s:%s' % (path, name) not in LONGER:
                long.append('%s:%s %d lines' % (path, name, lines))
    assert not long, '\n'.join(long)


def test_no_module_is_looked_up_by_name():
    """Imports are import statements, so the layers test and a reader see every edge."""
    lookups = []
    for path in product_files():
        for name, node in functions(parse(path)):
            where = '%s:%s' % (path, name)
            if where in NAME_LOOKUPS:
                continue
            if node.name in LOOKUP_FUNCTIONS:
                lookups.append(where + ' is a lookup by name')
            lookups += ['%s calls %s' % (where, called_name(call)) for call in ast.walk(node)
                        if isinstance(call, ast.Call) and called_name(call) in LOOKUP_CALLS]
    assert not lookups, '\n'.join(lookups)
