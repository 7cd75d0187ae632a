#!/bin/bash
grep -v '^#' numbers.txt | awk '{ s += $1 } END { print s }' > sum.txt
