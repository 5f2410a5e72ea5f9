#!/usr/bin/env bash
# scripts/check_function_length.py holds every function in src/ to 80 lines: the tree passes; a
# planted 81-line free function and a long inline method each fail with file, line and length,
# while a long lambda-free initializer and a long namespace-scope table do not count.
source "$(dirname "$0")/../lib/common.sh"
check="$SRC/scripts/check_function_length.py"
run_expect 0 python3 "$check" "$SRC"
expect_contains "$OUT" "every function in src/ within 80 lines"

mkdir -p "$WORK/tree/src/demo"
{
  echo '// A demo file: braces in "strings {" and comments { do not count.'
  echo 'namespace demo {'
  echo 'const int kTable[] = {'
  for i in $(seq 1 100); do echo "  $i,"; done
  echo '};'
  echo 'int long_free(int x) {'
  for i in $(seq 1 79); do echo "  x += $i;  // {"; done
  echo '  return x;'
  echo '}'
  echo 'int short_free(int x) {'
  echo '  auto f = [](int y) { return y + 1; };'
  echo '  return f(x);'
  echo '}'
  echo 'struct Widget {'
  echo '  int method() const {'
  echo '    int x = 0;'
  for i in $(seq 1 90); do echo "    x += $i;"; done
  echo '    return x;'
  echo '  }'
  echo '};'
  echo '}  // namespace demo'
} > "$WORK/tree/src/demo/demo.cpp"
run_expect 1 python3 "$check" "$WORK/tree"
expect_contains "$OUT" "src/demo/demo.cpp:105: 82 lines (over 80): int long_free(int x)"
expect_contains "$OUT" "src/demo/demo.cpp:192: 94 lines (over 80): int method() const"
expect_contains "$OUT" "2 function(s) over 80 lines"
run_expect 0 python3 "$check" "$WORK/tree" --max 100
