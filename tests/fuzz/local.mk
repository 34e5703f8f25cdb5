# libFuzzer targets, built only with --enable-fuzzing (CC=clang).
