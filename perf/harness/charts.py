"""Grouped bar charts as SVG, written by hand (no plotting library on the machine).

    svg("throughput.svg", "Throughput, x nginx", groups, series, {(group, series): value})
"""

COLORS = ["#2b6cb0", "#63b3ed", "#c05621", "#ed8936", "#2f855a", "#805ad5", "#718096"]


def svg(path, title, groups, series, values):
    """A grouped bar chart, written by hand (no plotting library on the machine)."""
    w, h, left, top, bottom = 900, 420, 60, 40, 90
    plot_w, plot_h = w - left - 20, h - top - bottom
    vmax = max([v for v in values.values() if v] + [1e-9]) * 1.1
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20" font-size="15">%s</text>' % (left, title)]
    for i in range(5):
        y = top + plot_h - plot_h * i / 4
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, left + plot_w, y, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.2f</text>' % (left - 5, y + 4, vmax * i / 4))
    gw = plot_w / max(len(groups), 1)
    bw = gw * 0.8 / max(len(series), 1)
    for gi, g in enumerate(groups):
        x0 = left + gi * gw + gw * 0.1
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (left + gi * gw + gw / 2, top + plot_h + 18, g))
        for si, s in enumerate(series):
            v = values.get((g, s))
            if v is None:
                continue
            bh = plot_h * v / vmax
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.3f</title></rect>' % (
                x0 + si * bw, top + plot_h - bh, bw * 0.95, bh, COLORS[si % len(COLORS)], s, g, v))
    for si, s in enumerate(series):
        x = left + si * 120
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (x, h - 40, COLORS[si % len(COLORS)]))
        out.append('<text x="%d" y="%d">%s</text>' % (x + 16, h - 30, s))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
