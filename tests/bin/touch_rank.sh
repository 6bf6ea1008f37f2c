#!/bin/sh
# Worker for --no-python tests: touch $1/$RANK (as PyTorch's own test_script.sh does).
touch "$1/$RANK"
