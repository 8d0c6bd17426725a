import os
import sys

# The scratch buggy loops are imported by name (``--impl buggy_loops:window1``).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
