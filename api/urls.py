from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from api.views import health

app_name = "api"

router = DefaultRouter()
router.register("health", health.HealthViewSet, basename="health")
# --- topics, records, cluster (owner: topics) ---
# --- end topics ---
# --- acls, groups, transactions, users, audit (owner: security) ---
# --- end security ---
# --- metrics (owner: dashboards) ---
# --- end metrics ---
# --- jobs (owner: jobs) ---
# --- end jobs ---

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema"), name="redoc"),
    *router.urls,
]
