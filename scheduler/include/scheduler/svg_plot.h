// A small SVG line plot (no dependencies), for hai-sim's reports.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ff::scheduler {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), in x order
};

// Writes one plot with a line per series, axes with ticks, and a legend. `log_x` plots x on a
// log10 scale (x must then be positive; others are dropped).
Status WriteSvgPlot(const std::string& path, const std::string& title, const std::string& x_label,
                    const std::string& y_label, const std::vector<PlotSeries>& series, bool log_x);

}  // namespace ff::scheduler
