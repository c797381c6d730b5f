#!/bin/bash
printf 'Hello, world!' > /app/answer.txt
