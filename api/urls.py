from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from api import trials, views

app_name = "api"

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("auth/token/", views.Token.as_view(), name="token"),
    path("runs/", views.RunList.as_view(), name="runs"),
    path("runs/<str:run_id>/", views.RunDetail.as_view(), name="run"),
    path("runs/<str:run_id>/events/", views.RunEvents.as_view(), name="run-events"),
    path("runs/<str:run_id>/report/", views.RunReport.as_view(), name="run-report"),
    path("runs/<str:run_id>/artifacts/<str:ref>/", views.RunArtifact.as_view(), name="run-artifact"),
    path("runs/<str:run_id>/kill/", views.RunKill.as_view(), name="run-kill"),
    path("approvals/", views.ApprovalList.as_view(), name="approvals"),
    path("approvals/<str:approval_id>/", views.ApprovalDetail.as_view(), name="approval"),
    path("approvals/<str:approval_id>/grant/", views.ApprovalGrant.as_view(), name="approval-grant"),
    path("approvals/<str:approval_id>/deny/", views.ApprovalDeny.as_view(), name="approval-deny"),
    path("approvals/<str:approval_id>/request-changes/", views.ApprovalRequestChanges.as_view(), name="approval-request-changes"),
    path("switch/", views.Switch.as_view(), name="switch"),
    path("trials/", trials.TrialList.as_view(), name="trials"),
    path("trials/<str:trial_id>/", trials.TrialDetail.as_view(), name="trial"),
    path("trials/<str:trial_id>/comparison/", trials.TrialComparison.as_view(), name="trial-comparison"),
    path("trials/<str:trial_id>/stop/", trials.TrialStop.as_view(), name="trial-stop"),
]
