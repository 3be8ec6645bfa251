"""The checkout's layout (docs/layout.md): the user's five modules at the root, tools/ only
commands, the package's layers importing downwards only, no sys.path edits in the product.
Read from the source (ast), nothing is imported."""
import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_MODULES = {'train.py', 'flags.py', 'resnet.py', 'image_preprocess.py', 'file_db.py'}
# Lower layers first: a module may import from its own layer and the ones above it here.
LAYERS = ['mlimages.errors mlimages.files file_db', 'mlimages.config flags',
          'mlimages.data image_preprocess', 'mlimages.distributed', 'mlimages.model resnet',
          'mlimages.run', 'mlimages.inference', 'mlimages.cli', 'mlimages.recordkit',
          'mlimages.bench', 'mlimages.demo', 'train']
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names.split()}


def product_files():
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith('.') and d not in ('tests', 'docs',
                                                                          '__pycache__')]
        for name in files:
            if name.endswith('.py'):
                yield os.path.relpath(os.path.join(folder, name), ROOT)


def module_of(path):
    return path[:-3].replace(os.sep, '.').replace('.__init__', '')


def rank(module):
    parts = module.split('.')
    for n in range(len(parts), 0, -1):
        if '.'.join(parts[:n]) in RANK:
            return RANK['.'.join(parts[:n])]
    return None


def imports(path):
    tree = ast.parse(open(os.path.join(ROOT, path)).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from (node.module + '.' + alias.name for alias in node.names)


def test_the_root_holds_the_users_five_modules():
    root = {name for name in os.listdir(ROOT) if name.endswith('.py')}
    assert root == USER_MODULES


def test_tools_holds_only_commands():
    for name in sorted(os.listdir(os.path.join(ROOT, 'tools'))):
        if name.endswith('.py'):
            text = open(os.path.join(ROOT, 'tools', name)).read()
            assert "if __name__ == '__main__':" in text, name


def test_every_package_module_imports_its_own_layer_or_lower():
    wrong = []
    for path in product_files():
        mine = rank(module_of(path))
        if path.startswith('tools' + os.sep) or mine is None:
            continue
        for name in imports(path):
            theirs = rank(name)
            if name.split('.')[0] == 'tools' or (theirs is not None and theirs > mine):
                wrong.append('%s imports %s' % (path, name))
    assert wrong == []


def test_no_product_file_edits_sys_path():
    edits = [path for path in product_files()
             if re.search(r'sys\.path(\.insert|\.append|\[:0\]| *=)',
                          open(os.path.join(ROOT, path)).read())]
    assert edits == []


def test_one_module_owns_the_exception_types():
    owners = set()
    for path in product_files():
        tree = ast.parse(open(os.path.join(ROOT, path)).read())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(
                    re.search(r'(Error|Exception|Interrupt)$', ast.unparse(base))
                    for base in node.bases):
                owners.add(path)
    assert owners == {os.path.join('mlimages', 'errors.py')}
