#!/bin/sh
# Worker for --no-python compatibility tests (PyTorch's bin/test_script.sh): announce and touch $1/$RANK.
FILE="$1/$RANK"
echo "creating $FILE"
touch "$FILE"
