// Our stand-in for cuda-samples' Common/helper_timer.h: the StopWatch API that
// p2pBandwidthLatencyTest.cu uses, with the Linux StopWatch's semantics (gettimeofday, milliseconds;
// reset while running restarts the running interval; the value is total + the running interval).
#ifndef FIDELITY_HELPER_TIMER_H
#define FIDELITY_HELPER_TIMER_H
#include <sys/time.h>

class StopWatchInterface {
 public:
  bool running = false;
  float total_ms = 0.f;
  struct timeval start_time;
  static float since(const struct timeval& t0) {
    struct timeval t;
    gettimeofday(&t, NULL);
    return (float)(1000.0 * (t.tv_sec - t0.tv_sec) + (0.001 * (t.tv_usec - t0.tv_usec)));
  }
};
inline bool sdkCreateTimer(StopWatchInterface** w) { *w = new StopWatchInterface(); return *w != NULL; }
inline bool sdkDeleteTimer(StopWatchInterface** w) { delete *w; *w = NULL; return true; }
inline bool sdkStartTimer(StopWatchInterface** w) { gettimeofday(&(*w)->start_time, NULL); (*w)->running = true; return true; }
inline bool sdkStopTimer(StopWatchInterface** w) {
  (*w)->total_ms += StopWatchInterface::since((*w)->start_time); (*w)->running = false; return true;
}
inline bool sdkResetTimer(StopWatchInterface** w) {
  (*w)->total_ms = 0.f;
  if ((*w)->running) gettimeofday(&(*w)->start_time, NULL);
  return true;
}
inline float sdkGetTimerValue(StopWatchInterface** w) {
  float v = (*w)->total_ms;
  if ((*w)->running) v += StopWatchInterface::since((*w)->start_time);
  return v;
}
#endif
