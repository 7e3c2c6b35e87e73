from django.contrib.auth import views as auth_views
from django.urls import path

from webui.views import home

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
    # --- end topics ---
    # --- acls, groups, transactions, users, audit (owner: security) ---
    # --- end security ---
    # --- dashboards (owner: dashboards) ---
    # --- end dashboards ---
    # --- jobs (owner: jobs) ---
    # --- end jobs ---
]
