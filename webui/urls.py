from django.contrib.auth import views as auth_views
from django.urls import path

from webui.views import (  # one module per console section (topics, security, jobs, ...)
    acls,
    audit,
    cluster,
    groups,
    home,
    jobs,
    pipelines,
    quotas,
    topics,
    transactions,
    users,
)

app_name = "webui"

urlpatterns = [
    path("", home.home, name="home"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="webui/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # --- topics, records, cluster (owner: topics) ---
    path("topics/", topics.topic_list, name="topic-list"),
    path("create-topic/", topics.topic_create, name="topic-create"),
    path("topics/<topic:name>/", topics.topic_detail, name="topic-detail"),
    path("topics/<topic:name>/delete/", topics.topic_delete, name="topic-delete"),
    path("topics/<topic:name>/configs/", topics.topic_configs, name="topic-configs"),
    path("topics/<topic:name>/partitions/", topics.topic_partitions, name="topic-partitions"),
    path("topics/<topic:name>/records/", topics.topic_records, name="topic-records"),
    path("cluster/", cluster.cluster, name="cluster"),
    path("cluster/brokers/<int:broker_id>/configs/", cluster.broker_configs, name="broker-configs"),
    # --- end topics ---
    # --- acls, groups, transactions, users, audit (owner: security) ---
    path("acls/", acls.acl_list, name="acl-list"),
    path("acls/new/", acls.acl_create, name="acl-create"),
    path("acls/delete/", acls.acl_delete, name="acl-delete"),
    path("groups/", groups.group_list, name="group-list"),
    path("groups/<kafka_id:group_id>/", groups.group_detail, name="group-detail"),
    path("groups/<kafka_id:group_id>/reset/", groups.group_reset, name="group-reset"),
    path("groups/<kafka_id:group_id>/configs/", groups.group_configs_page, name="group-configs"),
    path("groups/<kafka_id:group_id>/delete/", groups.group_delete, name="group-delete"),
    path("transactions/", transactions.transaction_list, name="transaction-list"),
    path(
        "transactions/producers/", transactions.transaction_producers, name="transaction-producers"
    ),
    path("transactions/abort/", transactions.transaction_abort, name="transaction-abort"),
    path(
        "transactions/id/<kafka_id:transactional_id>/",
        transactions.transaction_detail,
        name="transaction-detail",
    ),
    path("users/", users.user_list, name="user-list"),
    path("users/new/", users.user_create, name="user-create"),
    path("users/<kafka_id:name>/delete/", users.user_delete, name="user-delete"),
    path("audit/", audit.audit_list, name="audit-list"),
    # --- end security ---
    # --- quotas (owner: quotas) ---
    path("quotas/", quotas.quota_list, name="quota-list"),
    path("quotas/set/", quotas.quota_set, name="quota-set"),
    path("quotas/delete/", quotas.quota_delete, name="quota-delete"),
    # --- end quotas ---
    # --- dashboards (owner: dashboards) ---
    # --- end dashboards ---
    # --- jobs (owner: jobs) ---
    path("jobs/", jobs.job_list, name="job-list"),
    path("jobs/<uuid:pk>/", jobs.job_detail, name="job-detail"),
    # --- end jobs ---
    # --- pipelines (owner: pipelines) ---
    path("pipelines/", pipelines.pipeline_list, name="pipeline-list"),
    path("pipelines/new/", pipelines.pipeline_create, name="pipeline-create"),
    path("pipelines/<int:pk>/", pipelines.pipeline_detail, name="pipeline-detail"),
    path(
        "pipelines/<int:pk>/start/",
        pipelines.pipeline_action,
        {"action": "start"},
        name="pipeline-start",
    ),
    path(
        "pipelines/<int:pk>/stop/",
        pipelines.pipeline_action,
        {"action": "stop"},
        name="pipeline-stop",
    ),
    # --- end pipelines ---
]
