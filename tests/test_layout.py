"""The checkout's layout, whose map is mlimages/__init__.py's docstring and LAYERS: the
user's five modules at the root, tools/ only commands, the package's layers importing
downwards only, every module on the map of its package, no sys.path edits in the product,
every exception type defined in mlimages/errors.py and reached only through it.
Read from the source (ast), nothing is imported."""
import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_MODULES = {'train.py', 'flags.py', 'resnet.py', 'image_preprocess.py', 'file_db.py'}
PACKAGE = 'mlimages'
ERRORS = os.path.join(PACKAGE, 'errors.py')
# A line of a package docstring's map: `    [layer]  name.py` or `name/`, then what it holds.
MAP_LINE = re.compile(r'^    (?:(\d+) +)?(\w+)(\.py|/) ')


def parse(path):
    with open(os.path.join(ROOT, path)) as f:
        return ast.parse(f.read())


def layers():
    """mlimages/__init__.py's LAYERS, lower layers first: a module may import from its own
    layer and the ones before it."""
    for node in parse(os.path.join(PACKAGE, '__init__.py')).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == 'LAYERS':
            return ast.literal_eval(node.value)
    raise AssertionError('mlimages/__init__.py has no LAYERS')


LAYERS = layers()
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def map_lines(package_dir):
    """(layer or None, name, '.py' or '/') of each line of the package docstring's map."""
    doc = ast.get_docstring(parse(os.path.join(package_dir, '__init__.py')), clean=False)
    return [MAP_LINE.match(line).groups() for line in (doc or '').splitlines()
            if MAP_LINE.match(line)]


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
    for node in ast.walk(parse(path)):
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
    assert owners == {ERRORS}


def exception_names():
    return {node.name for node in parse(ERRORS).body if isinstance(node, ast.ClassDef)}


def reexported_exceptions(path, names):
    """Where `path` reaches an exception type of mlimages.errors through another module:
    `<module>.X` other than errors.X (tf.errors' own are other types), or
    `from <module> import X` other than from mlimages.errors."""
    found = []
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Attribute) and node.attr in names:
            owner = ast.unparse(node.value)
            if owner != 'errors' and not owner.endswith('.errors'):
                found.append('%s:%d %s' % (path, node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and node.module != 'mlimages.errors' and not (
                node.level == 1 and node.module == 'errors'):
            found += ['%s:%d from %s import %s' % (path, node.lineno, node.module, alias.name)
                      for alias in node.names if alias.name in names]
    return found


def test_callers_reach_exception_types_through_mlimages_errors():
    """errors.DataError, never file_db.DataError: a re-export hides where the type lives."""
    names = exception_names()
    found = [line for path in product_files() if path != ERRORS
             for line in reexported_exceptions(path, names)]
    assert not found, '\n'.join(found)


def test_the_package_docstring_draws_the_layers():
    """mlimages/__init__.py's map: a line per module or package, its layer first, as LAYERS."""
    drawn = {}
    for layer, name, _ in map_lines(PACKAGE):
        if layer is not None:
            module = name if name + '.py' in USER_MODULES else PACKAGE + '.' + name
            drawn.setdefault(int(layer), set()).add(module)
    assert sorted(drawn) == list(range(len(LAYERS)))
    assert [drawn[layer] for layer in sorted(drawn)] == [set(names) for names in LAYERS]


def test_every_product_module_has_a_layer():
    unplaced = [path for path in product_files() if not path.startswith('tools' + os.sep)
                and path != os.path.join(PACKAGE, '__init__.py') and rank(module_of(path)) is None]
    assert unplaced == []


def test_the_map_imports_nothing():
    """Reading LAYERS costs nothing: mlimages/__init__.py imports no module (TensorFlow least)."""
    tree = parse(os.path.join(PACKAGE, '__init__.py'))
    assert [ast.unparse(node) for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))] == []


def test_the_map_names_every_command():
    doc = ast.get_docstring(parse(os.path.join(PACKAGE, '__init__.py')))
    commands = [name[:-3] for name in sorted(os.listdir(os.path.join(ROOT, 'tools')))
                if name.endswith('.py')]
    assert [name for name in commands if not re.search(r'\b%s\b' % name, doc)] == []


def sub_packages():
    return sorted(name for name in os.listdir(os.path.join(ROOT, PACKAGE))
                  if os.path.isfile(os.path.join(ROOT, PACKAGE, name, '__init__.py')))


@pytest.mark.parametrize('package', sub_packages())
def test_each_package_docstring_names_each_of_its_modules(package):
    """One line a module, `    name.py  what it holds`: none missing, none gone."""
    folder = os.path.join(ROOT, PACKAGE, package)
    entries = sorted(name for name in os.listdir(folder) if name != '__init__.py' and (
        name.endswith('.py') or os.path.isfile(os.path.join(folder, name, '__init__.py'))))
    named = sorted(name + kind.replace('/', '') for _, name, kind in
                   map_lines(os.path.join(PACKAGE, package)))
    assert named == entries
