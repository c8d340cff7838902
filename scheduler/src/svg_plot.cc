#include "scheduler/svg_plot.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

namespace ff::scheduler {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// Round tick values covering [lo, hi]: multiples of 1, 2 or 5 x 10^k, about five of them.
std::vector<double> LinearTicks(double lo, double hi) {
  double raw = (hi - lo) / 5;
  double mag = std::pow(10, std::floor(std::log10(raw)));
  double r = raw / mag;
  double step = mag * (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10);
  std::vector<double> ticks;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  }
  return ticks;
}

// Ticks for a log axis spanning 10^lo .. 10^hi: the powers of ten, and 2x and 5x of them when
// the axis spans few decades.
std::vector<double> LogTicks(double lo, double hi) {
  std::vector<double> ticks;
  const bool fine = hi - lo < 3;
  for (double d = std::floor(lo); d <= std::ceil(hi); ++d) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m != 1 && !fine) continue;
      double v = m * std::pow(10, d);
      double e = std::log10(v);
      if (e >= lo - 1e-9 && e <= hi + 1e-9) ticks.push_back(v);
    }
  }
  return ticks;
}

}  // namespace

Status WriteSvgPlot(const std::string& path, const std::string& title, const std::string& x_label,
                    const std::string& y_label, const std::vector<PlotSeries>& series, bool log_x) {
  constexpr double kW = 800, kH = 500, kLeft = 70, kRight = 170, kTop = 40, kBottom = 60;
  constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c",
                                      "#ff7f0e", "#9467bd", "#8c564b"};
  auto fx = [&](double x) { return log_x ? std::log10(x) : x; };
  double x0 = std::numeric_limits<double>::max(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const PlotSeries& s : series) {
    for (const auto& [x, y] : s.points) {
      if (log_x && x <= 0) continue;
      x0 = std::min(x0, fx(x));
      x1 = std::max(x1, fx(x));
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (x0 > x1) x0 = 0, x1 = 1;
  if (y0 > y1) y0 = 0, y1 = 1;
  y0 = std::min(y0, 0.0);
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  auto px = [&](double x) { return kLeft + (fx(x) - x0) / (x1 - x0) * (kW - kLeft - kRight); };
  auto py = [&](double y) { return kH - kBottom - (y - y0) / (y1 - y0) * (kH - kTop - kBottom); };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kW / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
      << Escape(title) << "</text>\n";
  // Axes and ticks.
  svg << "<line x1=\"" << kLeft << "\" y1=\"" << kH - kBottom << "\" x2=\"" << kW - kRight
      << "\" y2=\"" << kH - kBottom << "\" stroke=\"black\"/>\n"
      << "<line x1=\"" << kLeft << "\" y1=\"" << kTop << "\" x2=\"" << kLeft << "\" y2=\""
      << kH - kBottom << "\" stroke=\"black\"/>\n";
  for (double xv : log_x ? LogTicks(x0, x1) : LinearTicks(x0, x1)) {
    svg << "<text x=\"" << Num(px(xv)) << "\" y=\"" << kH - kBottom + 18
        << "\" text-anchor=\"middle\">" << Num(xv) << "</text>\n"
        << "<line x1=\"" << Num(px(xv)) << "\" y1=\"" << kH - kBottom << "\" x2=\"" << Num(px(xv))
        << "\" y2=\"" << kH - kBottom + 5 << "\" stroke=\"black\"/>\n";
  }
  for (double yv : LinearTicks(y0, y1)) {
    svg << "<text x=\"" << kLeft - 6 << "\" y=\"" << Num(py(yv) + 4) << "\" text-anchor=\"end\">"
        << Num(yv) << "</text>\n"
        << "<line x1=\"" << kLeft << "\" y1=\"" << Num(py(yv)) << "\" x2=\"" << kW - kRight
        << "\" y2=\"" << Num(py(yv)) << "\" stroke=\"#eee\"/>\n";
  }
  svg << "<text x=\"" << (kLeft + kW - kRight) / 2 << "\" y=\"" << kH - 15
      << "\" text-anchor=\"middle\">" << Escape(x_label) << "</text>\n"
      << "<text x=\"18\" y=\"" << (kTop + kH - kBottom) / 2 << "\" text-anchor=\"middle\" "
      << "transform=\"rotate(-90 18 " << (kTop + kH - kBottom) / 2 << ")\">" << Escape(y_label)
      << "</text>\n";
  // Lines that overlap stay visible: each later series is thinner and dashed differently, so it
  // shows on top of the earlier ones without hiding them.
  static const char* kDashes[] = {"", "8 4", "3 3", "12 3 3 3", "1 3"};
  auto style = [&](std::size_t s, double width) {
    const std::string dash = kDashes[s % 5];
    std::ostringstream o;
    o << "stroke=\"" << kColours[s % 6] << "\" stroke-width=\"" << Num(width)
      << "\" stroke-opacity=\"0.9\"" << (dash.empty() ? "" : " stroke-dasharray=\"" + dash + "\"");
    return o.str();
  };
  for (std::size_t s = 0; s < series.size(); ++s) {
    const double width = std::max(1.2, 3.6 - 1.1 * static_cast<double>(s));
    svg << "<polyline fill=\"none\" " << style(s, width) << " points=\"";
    for (const auto& [x, y] : series[s].points) {
      if (log_x && x <= 0) continue;
      svg << Num(px(x)) << "," << Num(py(y)) << " ";
    }
    svg << "\"/>\n";
    double ly = kTop + 20 + 20 * static_cast<double>(s);
    svg << "<line x1=\"" << kW - kRight + 15 << "\" y1=\"" << ly << "\" x2=\"" << kW - kRight + 40
        << "\" y2=\"" << ly << "\" " << style(s, width) << "/>\n"
        << "<text x=\"" << kW - kRight + 46 << "\" y=\"" << ly + 4 << "\">"
        << Escape(series[s].name) << "</text>\n";
  }
  svg << "</svg>\n";
  std::ofstream out(path, std::ios::trunc);
  out << svg.str();
  if (!out.flush()) return Status::FromErrno(errno ? errno : EIO, "write " + path);
  return Status::Ok();
}

}  // namespace ff::scheduler
