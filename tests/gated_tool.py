"""A tool's command line with a call gate, for the process tests that interrupt a tool.

    TOOL_TEST_GATE=MODULE:FUNCTION:N:PATH python tests/gated_tool.py TOOL.py <arguments>

runs TOOL.py as `python TOOL.py <arguments>` does (its `__main__` block included), with
MODULE.FUNCTION replaced before the tool is loaded by a wrapper that, before its N-th call,
writes "test gate: holding before call N of MODULE.FUNCTION" to stderr and holds until PATH
exists. A test that signals the tool at that line knows that work is left (call N and what
follows), whatever the machine's speed. Without TOOL_TEST_GATE it is the tool.
"""
import functools
import importlib
import os
import runpy
import sys
import time

GATE_ENV = 'TOOL_TEST_GATE'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gate(module_name, function_name, call, path):
    module = importlib.import_module(module_name)
    original = getattr(module, function_name)
    calls = [0]

    @functools.wraps(original)
    def gated(*args, **kwargs):
        calls[0] += 1
        if calls[0] == call:
            sys.stderr.write('test gate: holding before call %d of %s.%s\n'
                             % (call, module_name, function_name))
            sys.stderr.flush()
            while not os.path.exists(path):
                time.sleep(0.05)
        return original(*args, **kwargs)

    setattr(module, function_name, gated)


if __name__ == '__main__':
    tool = os.path.abspath(sys.argv[1])
    sys.path[:0] = [os.path.dirname(tool), ROOT]
    value = os.environ.get(GATE_ENV)
    if value:
        module_name, function_name, call, path = value.split(':', 3)
        gate(module_name, function_name, int(call), path)
    sys.argv = sys.argv[1:]
    runpy.run_path(tool, run_name='__main__')
