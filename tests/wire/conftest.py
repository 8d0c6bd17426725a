import os
import sys

# The helper module of these tests (``_wire``) is imported by name.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
