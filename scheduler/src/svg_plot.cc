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

}  // namespace

Status WriteSvgPlot(const std::string& path, const std::string& title, const std::string& x_label,
                    const std::string& y_label, const std::vector<PlotSeries>& series, bool log_x) {
  constexpr double kW = 800, kH = 500, kLeft = 70, kRight = 170, kTop = 40, kBottom = 60;
  constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"};
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
  for (int i = 0; i <= 5; ++i) {
    double xv = x0 + (x1 - x0) * i / 5, yv = y0 + (y1 - y0) * i / 5;
    double x = kLeft + (kW - kLeft - kRight) * i / 5,
           y = kH - kBottom - (kH - kTop - kBottom) * i / 5;
    svg << "<text x=\"" << x << "\" y=\"" << kH - kBottom + 18 << "\" text-anchor=\"middle\">"
        << Num(log_x ? std::pow(10, xv) : xv) << "</text>\n"
        << "<text x=\"" << kLeft - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << Num(yv)
        << "</text>\n"
        << "<line x1=\"" << kLeft << "\" y1=\"" << y << "\" x2=\"" << kW - kRight << "\" y2=\"" << y
        << "\" stroke=\"#eee\"/>\n";
  }
  svg << "<text x=\"" << (kLeft + kW - kRight) / 2 << "\" y=\"" << kH - 15
      << "\" text-anchor=\"middle\">" << Escape(x_label) << "</text>\n"
      << "<text x=\"18\" y=\"" << (kTop + kH - kBottom) / 2 << "\" text-anchor=\"middle\" "
      << "transform=\"rotate(-90 18 " << (kTop + kH - kBottom) / 2 << ")\">" << Escape(y_label)
      << "</text>\n";
  for (std::size_t s = 0; s < series.size(); ++s) {
    const char* colour = kColours[s % 5];
    svg << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.5\" points=\"";
    for (const auto& [x, y] : series[s].points) {
      if (log_x && x <= 0) continue;
      svg << Num(px(x)) << "," << Num(py(y)) << " ";
    }
    svg << "\"/>\n";
    double ly = kTop + 20 + 20 * static_cast<double>(s);
    svg << "<line x1=\"" << kW - kRight + 15 << "\" y1=\"" << ly << "\" x2=\"" << kW - kRight + 40
        << "\" y2=\"" << ly << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n"
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
