"""Pages and actions. Every view checks its permission itself (pages.access);
the live trace's WebSocket route is in harness_site.asgi."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from api import token_pages
from monitoring import views as monitoring_views
from pages import again, control, ledger, mail_settings, new_run, overview, projects, result, run_detail, runs_list, trials
from pages import approvals as approval_views
from signin import views as signin_views

run_patterns = (
    [
        path("", runs_list.run_list, name="list"),
        path("new/", new_run.new_run, name="new"),
        path("<uuid:run_id>/", run_detail.run_detail, name="detail"),
        path("<uuid:run_id>/events/", run_detail.run_events, name="events"),
        path("<uuid:run_id>/events/<int:seq>/", run_detail.run_event, name="event"),
        path("<uuid:run_id>/summary/", run_detail.run_summary_json, name="summary"),
        path("<uuid:run_id>/report.json", run_detail.run_report, name="report"),
        path("<uuid:run_id>/result/", result.run_result, name="result"),
        path("<uuid:run_id>/rerun/", again.rerun_view, name="rerun"),
        path("<uuid:run_id>/artifacts/<str:ref>/", run_detail.run_artifact, name="artifact"),
        path("<uuid:run_id>/kill/", control.kill_run, name="kill"),
    ],
    "runs",
)

approval_patterns = (
    [
        path("", approval_views.inbox, name="inbox"),
        path("count/", approval_views.pending_count, name="count"),
        path("<uuid:request_id>/", approval_views.detail, name="detail"),
        path("<uuid:request_id>/context/", approval_views.diff_context, name="context"),
        path("<uuid:request_id>/grant/", approval_views.grant_view, name="grant"),
        path("<uuid:request_id>/deny/", approval_views.deny_view, name="deny"),
        path("<uuid:request_id>/changes/", approval_views.changes_view, name="changes"),
        path("<uuid:request_id>/ask-again/", again.ask_again_view, name="ask-again"),
    ],
    "approvals",
)

trial_patterns = (
    [
        path("", trials.trial_list, name="list"),
        path("<int:trial_id>/", trials.trial_detail, name="detail"),
        path("<int:trial_id>/report.html", trials.trial_report, name="report"),
        path("<int:trial_id>/export/", trials.trial_export, name="export"),
        path("<int:trial_id>/stop/", trials.trial_stop, name="stop"),
    ],
    "trials",
)

urlpatterns = [
    path("", control.home, name="home"),
    path("accounts/login/", signin_views.SignInPage.as_view(), name="login"),
    path("oidc/start/", signin_views.StartView.as_view(), name="oidc-start"),
    path("oidc/callback/", signin_views.CallbackView.as_view(), name="oidc-callback"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("runs/", include(run_patterns)),
    path("approvals/", include(approval_patterns)),
    path("trials/", include(trial_patterns)),
    path("overview/", overview.overview_page, name="overview"),
    path("mail/", mail_settings.mail_settings, name="mail-settings"),
    path("control/", control.global_switch, name="control"),
    path("control/projects/<slug:slug>/", control.project_switch, name="project-switch"),
    path("projects/<slug:slug>/audit/", projects.audit, name="project-audit"),
    path("projects/<slug:slug>/ledger/", ledger.project_ledger, name="project-ledger"),
    path("ledger/verify/", ledger.verify_now, name="ledger-verify"),
    path("tokens/", token_pages.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", token_pages.revoke, name="token-revoke"),
    path("admin/", admin.site.urls),
    path("api/", include("api.urls")),
    path("metrics", monitoring_views.metrics, name="metrics"),
]
