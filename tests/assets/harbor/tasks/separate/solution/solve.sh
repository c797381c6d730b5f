#!/bin/bash
echo 42 > /app/out.txt
echo "not an artifact" > /app/scratch.txt
