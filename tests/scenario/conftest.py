import os
import sys

# Helper modules of these tests (``_cli``) are imported by name.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
