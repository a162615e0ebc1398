/* Marks around a measured operation, for benchmarks/instructions.py: callgrind
   counts instructions only between marks_start() and marks_stop(), and
   writes them to a dump of its own. Built by run.py with gcc. */
#include <valgrind/callgrind.h>

void marks_start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }

void marks_stop(const char *name) {
  CALLGRIND_DUMP_STATS_AT(name);
  CALLGRIND_STOP_INSTRUMENTATION;
}
