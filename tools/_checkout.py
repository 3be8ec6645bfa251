"""The one thing a tool run as `python tools/x.py` needs first: Python then puts tools/ on
sys.path, not the checkout, so the checkout's modules (records, serving, ...) and the tools
package itself are made importable here. Each tool imports this module first when it runs
as a script; imported as tools.x (tests, train.py) the checkout is on sys.path already."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
