from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from api.views import health, jobs

app_name = "api"

router = DefaultRouter()
router.register("health", health.HealthViewSet, basename="health")
# --- topics, records, cluster (owner: topics) ---
from api.views import cluster, topics  # noqa: E402

router.register("topics", topics.TopicViewSet, basename="topic")
router.register("cluster", cluster.ClusterViewSet, basename="cluster")
router.register("brokers", cluster.BrokerNodeViewSet, basename="broker")
# --- end topics ---
# --- acls, groups, transactions, users, audit (owner: security) ---
from api.views import acls, audit, groups, transactions, users  # noqa: E402

router.register("acls", acls.AclViewSet, basename="acl")
router.register("groups", groups.GroupViewSet, basename="group")
router.register("transactions", transactions.TransactionViewSet, basename="transaction")
router.register("users", users.ScramUserViewSet, basename="user")
router.register("audit", audit.AuditEntryViewSet, basename="audit")
# --- end security ---
# --- quotas (owner: quotas) ---
from api.views import quotas  # noqa: E402

router.register("quotas", quotas.QuotaViewSet, basename="quota")
# --- end quotas ---
# --- metrics (owner: dashboards) ---
from api.views import metrics  # noqa: E402

router.register("metrics", metrics.MetricsViewSet, basename="metrics")
# --- end metrics ---
# --- jobs (owner: jobs) ---
router.register("jobs", jobs.JobViewSet, basename="job")
# --- end jobs ---
# --- pipelines (owner: pipelines) ---
from api.views import pipelines  # noqa: E402

router.register("pipelines", pipelines.PipelineViewSet, basename="pipeline")
# --- end pipelines ---

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema"), name="redoc"),
    *router.urls,
]
