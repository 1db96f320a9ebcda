#!/bin/sh
# Time the dashboard's 24 h view of 50 jobs (a day of 1 Hz samples written
# through the timeline layer) in headless Chromium: page load to all 50
# plots drawn, on a warm browser. Needs Debian's chromium and chromium-driver.
# Usage: bench/serve/dashboard.sh [RUNS]
set -eu
cd "$(dirname "$0")/../.."
for i in $(seq "${1:-3}"); do
  go test ./e2e -run 'TestServeDashboard24h$' -count=1 -v 2>&1 | grep -E '24 h view:'
done
