// The status dashboard served at `/` by server/http_status.h: one
// self-contained HTML page (inline CSS and script, no network) that reads
// the JSON API with fetch() and the bearer token from its own `?token=`.
// It lists jobs with their progress, draws the selected job's best cost
// over time and, for a finished job, its baseline table and a Gantt chart of
// the simulated iteration; and it lists workers with their last heartbeat.
//
//   res.set_content(std::string(DashboardHtml()), "text/html; charset=utf-8");
#ifndef BRAID_SERVER_DASHBOARD_HTML_H_
#define BRAID_SERVER_DASHBOARD_HTML_H_

#include <string_view>

namespace braid::server {

std::string_view DashboardHtml();

}  // namespace braid::server

#endif  // BRAID_SERVER_DASHBOARD_HTML_H_
